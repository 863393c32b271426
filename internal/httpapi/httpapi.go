// Package httpapi serves toc's HTTP JSON API over an engine.
//
// Every error answer is {"error":{"code","message","field"}} with the status
// chosen in one place, statusOf. A 409 carries the task as well.
package httpapi

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/recur"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// Config configures the API handler.
type Config struct {
	Engine *engine.Engine // required
	Logger *slog.Logger   // default slog.Default()
	// MaxPayload must match the engine's; it sizes the body caps.
	// Default task.DefaultMaxPayload.
	MaxPayload int
	// Access says which tokens reach which apps; nil allows everything
	// (local development). SetAccess replaces it.
	Access *Access
	// Mount adds routes (ServeMux patterns) served behind the same
	// authentication as the API, like "GET /metrics". Handlers may call
	// [CanAccess] to scope what they show.
	Mount map[string]http.Handler
	// Public adds routes served to anyone, like "GET /ui/" (static assets
	// that hold no data).
	Public map[string]http.Handler
	// AllowedOrigins are the origins (scheme://host[:port]) whose web pages
	// may change state through the API; pages of every other origin are
	// refused (browser.go). Empty: the server's own origin only.
	// SetAllowedOrigins replaces them.
	AllowedOrigins []string
	// MaxConcurrent caps the API requests served at once (long-polling
	// claims excepted); more get 429 with Retry-After, so that a flood
	// sheds load instead of queueing without bound. Default
	// MaxConcurrentDefault.
	MaxConcurrent int
	// MaxBodyMemory is the budget, in bytes, of the request bodies read,
	// decoded and held at once, process-wide (budget.go); a request past
	// it waits up to BodyWait, then gets 503 with Retry-After. Bodies
	// larger than one task's (batches) may take half of it. At least twice
	// the batch cap (64 MiB): a smaller value is raised to that. Default
	// MaxBodyMemoryDefault.
	MaxBodyMemory int64
	// BodyWait is how long a request waits for room in MaxBodyMemory.
	// Default BodyWaitDefault.
	BodyWait time.Duration
	// Health, when set, is asked by /readyz: an error makes toc not ready
	// and is the answer's message (the embedded store's full disk:
	// pebblestore.Store.Health).
	Health func() error
}

// MaxConcurrentDefault is Config.MaxConcurrent's default.
const MaxConcurrentDefault = 4096

// Handler serves the API.
type Handler struct {
	eng        *engine.Engine
	log        *slog.Logger
	maxBody    int64 // one task
	maxBatch   int64 // a batch
	mux        *http.ServeMux
	maxPayload int
	slots      chan struct{} // MaxConcurrent tokens
	bodies     *bodyBudget
	access     atomic.Pointer[Access]
	origins    atomic.Pointer[http.CrossOriginProtection] // browser.go
	public     *http.ServeMux                             // routes without authentication
	api        http.Handler                               // mux behind authentication
	health     func() error                               // Config.Health; nil: none
}

// maxNackError is the most bytes of a nack's error kept.
const maxNackError = 4096

// New returns the API handler.
func New(cfg Config) *Handler {
	h := &Handler{
		eng:        cfg.Engine,
		log:        cmp.Or(cfg.Logger, slog.Default()),
		maxPayload: cmp.Or(cfg.MaxPayload, task.DefaultMaxPayload),
		mux:        http.NewServeMux(),
		slots:      make(chan struct{}, cmp.Or(cfg.MaxConcurrent, MaxConcurrentDefault)),
		health:     cfg.Health,
	}
	// A maximal payload in base64, plus room for the other fields.
	h.maxBody = int64(h.maxPayload*4/3 + 64<<10)
	// A batch: room for MaxBatch maximal tasks, capped at 32 MiB (at the
	// default payload cap 1000 maximal tasks would need about 150 MB).
	// Decoding costs time linear in the size, so the cap bounds the work.
	h.maxBatch = min(32<<20, int64(engine.MaxBatch)*h.maxBody)
	h.bodies = newBodyBudget(cmp.Or(cfg.MaxBodyMemory, MaxBodyMemoryDefault), h.maxBody, h.maxBatch,
		cmp.Or(cfg.BodyWait, BodyWaitDefault))

	m := h.mux
	m.HandleFunc("POST /v1/tasks", h.limited(h.create))
	m.HandleFunc("POST /v1/tasks:batch", h.limited(h.batch))
	m.HandleFunc("GET /v1/tasks/{id}", h.limited(h.get))
	m.HandleFunc("PATCH /v1/tasks/{id}", h.limited(h.patch))
	m.HandleFunc("DELETE /v1/tasks/{id}", h.limited(h.cancel))
	m.HandleFunc("POST /v1/tasks/{id}/retry", h.limited(h.retry))
	m.HandleFunc("POST /v1/tasks/{id}/ack", h.limited(h.ack))
	m.HandleFunc("POST /v1/tasks/{id}/nack", h.limited(h.nack))
	m.HandleFunc("GET /v1/apps/{app}/keys/{key}", h.limited(h.getByKey))
	m.HandleFunc("DELETE /v1/apps/{app}/keys/{key}", h.limited(h.cancelByKey))
	m.HandleFunc("GET /v1/apps/{app}/tasks", h.limited(h.list))
	m.HandleFunc("POST /v1/apps/{app}/tasks:retry", h.limited(h.retryAll))   // bulk.go
	m.HandleFunc("POST /v1/apps/{app}/tasks:cancel", h.limited(h.cancelAll)) // bulk.go
	m.HandleFunc("GET /v1/apps/{app}", h.limited(h.app))
	m.HandleFunc("POST /v1/apps/{app}/claim", h.budgeted(h.claim)) // waits by design; bounded by its wait
	m.HandleFunc("POST /v1/apps/{app}/tasks:ack", h.limited(h.ackMany))
	// Schedules (recurring timers): schedules.go.
	m.HandleFunc("POST /v1/schedules", h.limited(h.createSchedule))
	m.HandleFunc("GET /v1/schedules/{id}", h.limited(h.getSchedule))
	m.HandleFunc("PATCH /v1/schedules/{id}", h.limited(h.patchSchedule))
	m.HandleFunc("DELETE /v1/schedules/{id}", h.limited(h.deleteSchedule))
	m.HandleFunc("POST /v1/schedules/{id}/pause", h.limited(h.pauseSchedule))
	m.HandleFunc("POST /v1/schedules/{id}/resume", h.limited(h.resumeSchedule))
	m.HandleFunc("GET /v1/schedules/{id}/next", h.limited(h.nextTimes))
	m.HandleFunc("GET /v1/apps/{app}/schedules", h.limited(h.listSchedules))
	m.HandleFunc("GET /v1/apps/{app}/schedules/{key}", h.limited(h.getScheduleByKey))
	m.HandleFunc("DELETE /v1/apps/{app}/schedules/{key}", h.limited(h.deleteScheduleByKey))
	m.HandleFunc("GET /v1/admin/backup", h.limited(h.backup))
	m.HandleFunc("GET /v1/admin/export", h.limited(h.export))
	m.HandleFunc("POST /v1/admin/import", h.limited(h.importTasks))
	m.HandleFunc("GET /v1/admin/clock", h.limited(h.getClock))    // clock.go
	m.HandleFunc("POST /v1/admin/clock", h.budgeted(h.moveClock)) // waits for the deliveries it makes
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := h.allowed(r); allow != "" {
			w.Header().Set("Allow", allow)
			h.writeError(w, r, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
				msg: r.Method + " is not allowed on " + r.URL.Path + ": use " + allow})
			return
		}
		h.writeError(w, r, &apiError{status: http.StatusNotFound, code: "not_found", msg: "no such route: " + r.Method + " " + r.URL.Path})
	})
	for pattern, handler := range cfg.Mount {
		m.Handle(pattern, handler)
	}
	h.public = http.NewServeMux()
	h.public.HandleFunc("GET /healthz", h.healthz)
	h.public.HandleFunc("GET /readyz", h.readyz)
	for pattern, handler := range cfg.Public {
		h.public.Handle(pattern, handler)
	}
	// Every other request goes to the API: one routing step decides, where
	// asking the public mux first whether it has the route cost a lookup
	// that, for the API's routes, also listed the methods the path allows.
	h.public.HandleFunc("/", h.serveAPI)
	h.access.Store(cfg.Access)
	if err := h.SetAllowedOrigins(cfg.AllowedOrigins); err != nil {
		panic("httpapi: " + err.Error()) // the config file's validation lets none through
	}
	h.api = h.authenticate(m)
	return h
}

// allowed lists the methods that have a route for r's path, for the Allow
// header of a 405; "" when no method has one. The catch-all route that
// answers an unknown path in JSON also catches a known path with the wrong
// method (ServeMux would answer that 405 itself, but only without a
// catch-all), so this asks both muxes which methods would match.
func (h *Handler) allowed(r *http.Request) string {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if method == r.Method {
			continue
		}
		probe := *r
		probe.Method = method
		if _, p := h.public.Handler(&probe); p != "" && p != "/" { // "/": the API's
			allow = append(allow, method)
		} else if _, p := h.mux.Handler(&probe); p != "" && p != "/" {
			allow = append(allow, method)
		}
	}
	return strings.Join(allow, ", ")
}

// CanAccess reports whether the request's token reaches app (always true
// when no token is configured). For handlers added with Config.Mount.
func CanAccess(r *http.Request, app string) bool { return who(r.Context()).can(app) }

// IsAdmin reports whether the request's token reaches every app.
func IsAdmin(r *http.Request) bool { return who(r.Context()).admin }

// ServeHTTP serves the health routes to anyone and everything else to
// authenticated requests that pass the rules for web pages (browser.go).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.public.ServeHTTP(w, r) // the API's requests: serveAPI
}

// serveAPI serves the requests that no public route takes.
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request) {
	if err := h.checkBrowserWrite(r); err != nil {
		// Only a route that may change state is refused: an unknown path
		// or a known one with another method gets its 404 or 405.
		if _, pattern := h.mux.Handler(r); pattern != "/" {
			h.writeError(w, r, err)
			return
		}
	}
	h.api.ServeHTTP(w, r)
}

// Route returns the pattern of the route r goes to, like "POST /v1/tasks"
// ("" for none): the name of the request's span (telemetry.Handler).
func (h *Handler) Route(r *http.Request) string {
	if _, pattern := h.public.Handler(r); pattern != "" && pattern != "/" { // "/": the API's (serveAPI)
		return pattern
	}
	_, pattern := h.mux.Handler(r)
	return pattern
}

// authorizeID checks that the caller may write to task id. A task of an app
// the token does not reach is answered exactly as a task that does not
// exist (404), so that no route tells one token about another app's tasks.
func (h *Handler) authorizeID(r *http.Request, id task.ID) error {
	p := who(r.Context())
	if p.admin {
		return nil
	}
	t, err := h.eng.Get(r.Context(), id)
	if err != nil {
		return err
	}
	if !p.can(t.App) {
		return errNoTask(id)
	}
	return nil
}

// errNoTask is the answer for an unknown task id, and for one the token
// cannot reach.
func errNoTask(id task.ID) error { return fmt.Errorf("%w: %s", store.ErrNotFound, id) }

// errNoKey is the answer for an unknown key, and for a key of an app the
// token cannot reach.
func errNoKey(app, key string) error {
	return fmt.Errorf("%w: no task with key %q in app %q", store.ErrNotFound, key, app)
}

// authorizeApp is authorizeID for routes that name the app.
func authorizeApp(r *http.Request, app string) error {
	if !who(r.Context()).can(app) {
		return errForbidden(app)
	}
	return nil
}

// errBusy is the answer past MaxConcurrent.
var errBusy = &apiError{status: http.StatusTooManyRequests, code: "too_many_requests",
	msg: "the server is at its limit of concurrent requests; retry after the Retry-After delay"}

// limited sheds load: past MaxConcurrent requests at once, it answers 429
// at once instead of queueing. Its body is charged to the budget.
func (h *Handler) limited(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
			h.charged(next, w, r)
		default:
			h.writeError(w, r, errBusy)
		}
	}
}

// apiError is an error that already knows its answer.
type apiError struct {
	status int
	code   string
	msg    string
	field  string
}

func (e *apiError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return &task.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// statusOf maps an error to its HTTP status and code: the one place that does.
func statusOf(err error) (status int, code, field string) {
	var fe *task.FieldError
	var ae *apiError
	var ce *engine.ConflictError
	var sce *engine.ScheduleConflictError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.field
	case errors.As(err, &fe):
		return http.StatusBadRequest, "invalid_field", fe.Field
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, "not_found", ""
	case errors.As(err, &ce), errors.As(err, &sce):
		return http.StatusConflict, "conflict", ""
	case errors.Is(err, engine.ErrTooLarge), errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "too_large", ""
	case errors.As(err, new(*engine.RateLimitError)):
		return http.StatusTooManyRequests, "rate_limited", ""
	case errors.Is(err, engine.ErrNotReady), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable, "not_ready", ""
	case errors.Is(err, store.ErrDiskFull):
		return http.StatusInsufficientStorage, "disk_full", ""
	}
	return http.StatusInternalServerError, "internal", ""
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func errorJSON(err error) (int, any) {
	status, code, field := statusOf(err)
	body := errorAnswer{Error: errorBody{Code: code, Message: messageOf(err, status), Field: field}}
	var ce *engine.ConflictError
	if errors.As(err, &ce) {
		body.Task = ce.Task
	}
	return status, body
}

// errorAnswer is an error's answer: the error, and the task a conflict is
// about.
type errorAnswer struct {
	Error errorBody  `json:"error"`
	Task  *task.Task `json:"task,omitempty"`
}

// messageOf is the message answered for err, whose status is status.
func messageOf(err error, status int) string {
	var mbe *http.MaxBytesError
	switch {
	case status == http.StatusInternalServerError:
		return "internal error; the server log has the details"
	case errors.Is(err, store.ErrNotFound):
		// One answer for every task or key that is absent or out of the
		// token's reach, whichever backend said so and how.
		return "no such task"
	case errors.As(err, &mbe):
		return fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)
	case status == http.StatusInsufficientStorage:
		return "the disk of toc's store is full: nothing was stored; retry once space is freed (toc takes writes again by itself; /readyz says when)"
	}
	return err.Error()
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The request's context ended: its client went away (a long-poll
		// claim it gave up on, say), or toc is shutting down (the server
		// cancels every request's context). Nothing failed on this side
		// worth a log line, but it is answered all the same: a handler
		// that wrote nothing would answer an empty 200, which a client
		// still there takes for success (a PATCH cut short at SIGTERM did).
		h.log.DebugContext(r.Context(), "request cancelled", slog.String("method", r.Method), slog.String("path", r.URL.Path))
		err = &apiError{status: http.StatusServiceUnavailable, code: "not_ready",
			msg: "the request was cancelled before it was done (toc is shutting down, or the client went away): retry it"}
	}
	status, body := errorJSON(err)
	if status == http.StatusInternalServerError {
		h.log.ErrorContext(r.Context(), "request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		secs := 1
		var rl *engine.RateLimitError
		if errors.As(err, &rl) {
			secs = max(1, int(math.Ceil(rl.RetryAfter.Seconds())))
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeJSON(w, status, body)
}

// pathID parses the {id} path segment. An id that cannot exist is a 404.
func pathID(r *http.Request) (task.ID, error) {
	id, err := task.ParseID(r.PathValue("id"))
	if err != nil {
		return id, fmt.Errorf("%w: %q is not a task id", store.ErrNotFound, r.PathValue("id"))
	}
	return id, nil
}

// createRequest is the body of POST /v1/tasks and of each batch item.
type createRequest struct {
	App           string            `json:"app"`
	Key           *string           `json:"key"`
	DueAt         *string           `json:"due_at"`
	Delay         *string           `json:"delay"`
	Deadline      *string           `json:"deadline"`
	Payload       jsontext.Value    `json:"payload"`
	PayloadBase64 *string           `json:"payload_base64"`
	Target        *task.Target      `json:"target"`
	Retry         *task.RetryPolicy `json:"retry"`
}

// Times toc accepts: the store keeps Unix milliseconds of years 1970-9998.
var (
	minTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = recur.End // a schedule's occurrences are never later: they export and import
)

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, badField(field, "must be an RFC 3339 time like 2026-01-02T15:04:05.123Z, got %q", s)
	}
	if t.Before(minTime) || !t.Before(maxTime) {
		return t, badField(field, "must be between 1970-01-01 and 9998-12-31, got %q", s)
	}
	return t, nil
}

// dueAt resolves exactly one of due_at and delay.
func dueAt(due, delay *string, now time.Time, required bool) (*time.Time, error) {
	t, given, err := dueTime(due, delay, now, required)
	if !given || err != nil {
		return nil, err
	}
	return &t, nil
}

// dueTime is dueAt for a value (a create's, which must have one): given
// says whether one of the two was.
func dueTime(due, delay *string, now time.Time, required bool) (t time.Time, given bool, err error) {
	switch {
	case due != nil && delay != nil:
		return t, false, badField("due_at", `give one of "due_at" and "delay", not both`)
	case due != nil:
		t, err := parseTime("due_at", *due)
		return t, true, err
	case delay != nil:
		d, err := time.ParseDuration(*delay)
		if err != nil {
			return t, false, badField("delay", `must be a Go duration like "30m" or "1500ms", got %q`, *delay)
		}
		if d < 0 {
			return t, false, badField("delay", `must not be negative, got %q (use "0s" for now)`, *delay)
		}
		t = now.Add(d)
		if t.Before(minTime) || !t.Before(maxTime) {
			return t, false, badField("delay", "puts the due time outside 1970-9998, got %q", *delay)
		}
		return t, true, nil
	case required:
		return t, false, badField("due_at", `one of "due_at" or "delay" is required`)
	}
	return t, false, nil
}

func payloadOf(raw jsontext.Value, b64 *string) ([]byte, bool, error) {
	switch {
	case raw != nil && b64 != nil:
		return nil, false, badField("payload", `give one of "payload" and "payload_base64", not both`)
	case raw != nil:
		// raw is the request's own: decoding copied it out of the body.
		return raw, true, nil
	case b64 != nil:
		p, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, false, badField("payload_base64", "is not standard base64: %v", err)
		}
		return p, true, nil
	}
	return nil, false, nil
}

func (req *createRequest) params(now time.Time) (engine.CreateParams, error) {
	p := engine.CreateParams{App: req.App}
	if err := task.ValidateApp(req.App); err != nil {
		return p, err
	}
	if req.Key != nil {
		if err := task.ValidateKey(*req.Key); err != nil {
			return p, err
		}
		p.Key = *req.Key
	}
	due, _, err := dueTime(req.DueAt, req.Delay, now, true)
	if err != nil {
		return p, err
	}
	p.DueAt = due
	if req.Deadline != nil {
		d, err := parseTime("deadline", *req.Deadline)
		if err != nil {
			return p, err
		}
		p.Deadline = &d
	}
	if p.Payload, _, err = payloadOf(req.Payload, req.PayloadBase64); err != nil {
		return p, err
	}
	if req.Target != nil { // else the app's default target, if it has one
		p.Target = *req.Target
	}
	if req.Retry != nil {
		p.Retry = *req.Retry
	}
	return p, nil
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.eng.Ready() {
		h.writeError(w, r, engine.ErrNotReady)
		return
	}
	if h.health != nil {
		if err := h.health(); err != nil {
			// Not ready, whatever the error (507 for the requests the
			// disk refuses): a load balancer sends the requests
			// elsewhere; the message says why.
			h.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: "not_ready", msg: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decodeCreate(w, r, h.maxBody, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p, err := req.params(h.now())
	if err == nil {
		err = authorizeApp(r, p.App)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	p.TraceParent, p.TraceState = telemetry.FromRequest(r)
	rs, err := h.eng.Create(r.Context(), []engine.CreateParams{p})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	res := rs[0]
	if res.Err != nil {
		h.writeError(w, r, res.Err)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, res.Task)
}

type batchItem struct {
	Task    *task.Task `json:"task,omitempty"`
	Created *bool      `json:"created,omitempty"`
	Error   *errorBody `json:"error,omitempty"`
}

// batchEntry is one task of a batch as the handler reads it: its params,
// or the error that is its answer.
type batchEntry struct {
	p   engine.CreateParams
	err error
}

func (h *Handler) batch(w http.ResponseWriter, r *http.Request) {
	entries, err := h.readBatch(w, r, who(r.Context()), h.now())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	items := make([]batchItem, len(entries))
	ps := make([]engine.CreateParams, 0, len(entries))
	var idx []int                      // the item of each of ps, when not all are there
	tp, ts := telemetry.FromRequest(r) // every task of the batch is in the request's trace
	for i, e := range entries {
		if e.err != nil {
			items[i].Error = itemError(e.err)
			continue
		}
		e.p.TraceParent, e.p.TraceState = tp, ts
		if idx == nil && len(ps) < i {
			idx = make([]int, len(ps), len(entries))
			for j := range idx {
				idx[j] = j
			}
		}
		ps = append(ps, e.p)
		if idx != nil {
			idx = append(idx, i)
		}
	}
	entries = nil // the params are in ps now
	if len(ps) > 0 {
		rs, err := h.eng.Create(r.Context(), ps)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for j, res := range rs {
			i := j
			if idx != nil {
				i = idx[j]
			}
			if res.Err != nil {
				items[i].Error = itemError(res.Err)
				continue
			}
			created := res.Created
			items[i].Task, items[i].Created = res.Task, &created
		}
	}
	writeResults(w, items, preferMinimal(r))
}

// readBatch reads the body of a batch into one entry per task.
func (h *Handler) readBatch(w http.ResponseWriter, r *http.Request, caller *principal, now time.Time) ([]batchEntry, error) {
	var req struct {
		Tasks []batchEntry `json:"tasks"`
	}
	if err := decodeStream(w, r, h.maxBatch, &req, h.batchReader(caller, now, r.ContentLength)); err != nil {
		return nil, err
	}
	if req.Tasks == nil {
		return nil, badField("tasks", "is required: an array of up to %d tasks", engine.MaxBatch)
	}
	return req.Tasks, nil
}

// batchReader reads each task of a batch as the body streams in
// (decodeStream), so that the body is never held whole: each item, null
// included, is turned into its params, or its error, and only those are
// kept. More than engine.MaxBatch items end the reading with a 400.
// bodySize, the body's length when known (else 0 or less), sizes the
// array of entries once rather than growing it as the items come.
func (h *Handler) batchReader(caller *principal, now time.Time, bodySize int64) jsonv2.Options {
	n := 0
	// The entries: made about as many as the body has room for, then
	// left to the decoder (SkipFunc), which appends to them. A missing
	// "tasks" or a null stays nil.
	entries := jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, es *[]batchEntry) error {
		if *es == nil && bodySize > 0 && dec.PeekKind() == '[' {
			*es = make([]batchEntry, 0, min(engine.MaxBatch, bodySize/minItemBytes+1))
		}
		return jsonv2.SkipFunc
	})
	return jsonv2.WithUnmarshalers(jsonv2.JoinUnmarshalers(entries, jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, e *batchEntry) error {
		if n++; n > engine.MaxBatch {
			return badField("tasks", "has more than %d tasks: send them in several requests", engine.MaxBatch)
		}
		raw, err := dec.ReadValue() // valid until the next read: batchItem copies what it keeps
		if err != nil {
			return err
		}
		e.p, e.err = h.batchItem(raw, now, caller)
		return nil
	})))
}

// minItemBytes is about the least a batch's item takes in the body
// (batchReader's guess of the items' number from its length):
// {"app":"a","key":"k-1","delay":"1m","target":{"pull":{}}}, a comma.
const minItemBytes = 64

// batchItem reads one task of a batch: its size is checked before it is
// decoded, so that no item costs more than a create of its own would, and
// the caller's right to its app before its payload is copied, so that the
// items of an app the token does not reach cost only the time to read them.
func (h *Handler) batchItem(raw jsontext.Value, now time.Time, caller *principal) (engine.CreateParams, error) {
	if len(raw) > int(h.maxBody) {
		return engine.CreateParams{}, &apiError{status: http.StatusRequestEntityTooLarge, code: "too_large",
			msg: fmt.Sprintf("task is larger than %d bytes", h.maxBody)}
	}
	if !caller.admin {
		// The app alone; every other member is skipped, not kept. An item
		// this cannot read is left to the full decoding for its error.
		var head struct {
			App string `json:"app"`
		}
		if jsonv2.Unmarshal(raw, &head) == nil && task.ValidateApp(head.App) == nil && !caller.can(head.App) {
			return engine.CreateParams{}, errForbidden(head.App)
		}
	}
	var cr createRequest
	if !createFast(raw, &cr) {
		if err := decodeBytes(raw, &cr); err != nil {
			return engine.CreateParams{}, err
		}
	}
	p, err := cr.params(now)
	if err == nil && !caller.can(p.App) {
		err = errForbidden(p.App)
	}
	return p, err
}

// itemError is the error object of one item of a batch answer: an error
// answer's, whose status the code implies.
func itemError(err error) *errorBody {
	status, code, field := statusOf(err)
	return &errorBody{Code: code, Message: messageOf(err, status), Field: field}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err == nil {
		var t *task.Task
		if t, err = h.eng.Get(r.Context(), id); err == nil {
			if !who(r.Context()).can(t.App) {
				err = errNoTask(id)
			} else {
				writeJSON(w, http.StatusOK, t)
				return
			}
		}
	}
	h.writeError(w, r, err)
}

func (h *Handler) getByKey(w http.ResponseWriter, r *http.Request) {
	if authorizeApp(r, r.PathValue("app")) != nil {
		h.writeError(w, r, errNoKey(r.PathValue("app"), r.PathValue("key")))
		return
	}
	t, err := h.eng.GetByKey(r.Context(), r.PathValue("app"), r.PathValue("key"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) patch(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		DueAt         *string        `json:"due_at"`
		Delay         *string        `json:"delay"`
		Deadline      jsontext.Value `json:"deadline"`
		Payload       jsontext.Value `json:"payload"`
		PayloadBase64 *string        `json:"payload_base64"`
	}
	if err := decode(w, r, h.maxBody, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	var p engine.PatchParams
	if p.DueAt, err = dueAt(req.DueAt, req.Delay, h.now(), false); err != nil {
		h.writeError(w, r, err)
		return
	}
	switch {
	case req.Deadline == nil:
	case string(req.Deadline) == "null":
		p.ClearDeadline = true
	default:
		var s string
		if json.Unmarshal(req.Deadline, &s) != nil {
			h.writeError(w, r, badField("deadline", "must be an RFC 3339 time or null"))
			return
		}
		d, err := parseTime("deadline", s)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		p.Deadline = &d
	}
	payload, set, err := payloadOf(req.Payload, req.PayloadBase64)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if set {
		p.Payload = &payload
	}
	if p.DueAt == nil && p.Deadline == nil && !p.ClearDeadline && p.Payload == nil {
		h.writeError(w, r, badField("due_at", `nothing to change: give "due_at", "delay", "deadline" or "payload"`))
		return
	}
	if err := h.authorizeID(r, id); err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.eng.Patch(r.Context(), id, p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err == nil {
		err = h.authorizeID(r, id)
	}
	if err == nil {
		if _, err = h.eng.Cancel(r.Context(), id); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	h.writeError(w, r, err)
}

func (h *Handler) cancelByKey(w http.ResponseWriter, r *http.Request) {
	if authorizeApp(r, r.PathValue("app")) != nil {
		h.writeError(w, r, errNoKey(r.PathValue("app"), r.PathValue("key")))
		return
	}
	if _, err := h.eng.CancelByKey(r.Context(), r.PathValue("app"), r.PathValue("key")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err == nil {
		err = h.authorizeID(r, id)
	}
	if err == nil {
		var t *task.Task
		if t, err = h.eng.Retry(r.Context(), id); err == nil {
			writeJSON(w, http.StatusOK, t)
			return
		}
	}
	h.writeError(w, r, err)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	if err := authorizeApp(r, r.PathValue("app")); err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	state := task.State(q.Get("state"))
	if state == "" {
		h.writeError(w, r, badField("state", "is required: one of %v", task.States))
		return
	}
	after, limit, err := pageParams(q)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ts, next, err := h.eng.List(r.Context(), r.PathValue("app"), state, after, limit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Tasks      []*task.Task `json:"tasks"`
		NextCursor string       `json:"next_cursor,omitempty"`
	}{nonNil(ts), nextCursor(next)})
}

// listLimitDefault is the page size of a list request that gives no limit.
const listLimitDefault = 100

// pageParams reads the paging parameters of a list request (GET
// /v1/apps/{app}/tasks and /v1/apps/{app}/schedules): limit, whose range
// the engine checks, and cursor, the id to list after.
func pageParams(q url.Values) (after task.ID, limit int, err error) {
	limit = listLimitDefault
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil {
			return after, 0, badField("limit", "must be a number between 1 and %d", engine.MaxList)
		}
	}
	if c := q.Get("cursor"); c != "" {
		if after, err = task.ParseID(c); err != nil {
			return after, 0, badField("cursor", "is not a cursor this server gave out")
		}
	}
	return after, limit, nil
}

// nextCursor is a page's next_cursor: the id to list after, "" (left out)
// on the last page.
func nextCursor(next task.ID) string {
	if next.IsZero() {
		return ""
	}
	return next.String()
}

// nonNil returns s, or an empty slice for nil, so that a page of nothing
// reads [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// appSettings is GET /v1/apps/{app}: the settings in force for the app,
// defaults filled in. Secrets and tokens are never shown.
type appSettings struct {
	App        string           `json:"app"`
	Target     *task.Target     `json:"target,omitempty"`
	Retry      task.RetryPolicy `json:"retry"`
	MaxPayload int              `json:"max_payload"`
	// MaxSchedules is -1 for no cap.
	MaxSchedules int `json:"max_schedules"`
	Weight       int `json:"weight"`
	Rate         struct {
		DeliveriesPerSecond float64 `json:"deliveries_per_second"`
		Burst               int     `json:"burst"`
		MaxInFlight         int     `json:"max_in_flight"`
		CreatesPerSecond    float64 `json:"creates_per_second"`
	} `json:"rate"`
}

func (h *Handler) app(w http.ResponseWriter, r *http.Request) {
	app := r.PathValue("app")
	if err := task.ValidateApp(app); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := authorizeApp(r, app); err != nil {
		h.writeError(w, r, err)
		return
	}
	p := h.eng.EffectivePolicy(app)
	out := appSettings{App: app, Target: p.Target, Retry: p.Retry, MaxPayload: p.MaxPayload, MaxSchedules: p.MaxSchedules, Weight: p.Weight}
	out.Rate.DeliveriesPerSecond, out.Rate.Burst = p.DeliveriesPerSecond, p.Burst
	out.Rate.MaxInFlight, out.Rate.CreatesPerSecond = p.MaxInFlight, p.CreatesPerSecond
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) claim(w http.ResponseWriter, r *http.Request) {
	if err := authorizeApp(r, r.PathValue("app")); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		Max   *int           `json:"max"`
		Lease *task.Duration `json:"lease"`
		Wait  *task.Duration `json:"wait"`
	}
	if err := decodeOptional(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p := engine.LeaseParams{Max: 10, Lease: 30 * time.Second}
	if req.Max != nil {
		p.Max = *req.Max
	}
	if req.Lease != nil {
		p.Lease = req.Lease.Std()
	}
	if req.Wait != nil {
		p.Wait = req.Wait.Std()
	}
	ts, err := h.eng.Lease(r.Context(), r.PathValue("app"), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeTasks(w, "tasks", ts)
}

// decodeOptional is decode for bodies that may be empty (all defaults).
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	err := decode(w, r, 64<<10, v)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == "invalid_json" && strings.Contains(ae.msg, "empty") {
		return nil
	}
	return err
}

func (h *Handler) ack(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		Lease string `json:"lease"`
	}
	if err := decode(w, r, 64<<10, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.authorizeID(r, id); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.eng.Ack(r.Context(), id, req.Lease); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ackManyItem is one ack of POST /v1/apps/{app}/tasks:ack.
type ackManyItem struct {
	ID    string `json:"id"`
	Lease string `json:"lease"`
}

// ackManyResult is the outcome of one ack, in the order sent: {} when the
// task is delivered.
type ackManyResult struct {
	Error *errorBody `json:"error,omitempty"`
}

// maxAckBody bounds the body of tasks:ack: 1000 acks take about 100 KB.
const maxAckBody = 1 << 20

// ackMany acks many claimed tasks of the app in one durable write. The
// token must reach the app (403); a task of another app is answered as
// absent, item by item.
func (h *Handler) ackMany(w http.ResponseWriter, r *http.Request) {
	app := r.PathValue("app")
	if err := authorizeApp(r, app); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := task.ValidateApp(app); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		Acks []ackManyItem `json:"acks"`
	}
	var plain []engine.AckParams // the acks when the body is in the plain form (ackPlain)
	err := readBody(w, r, maxAckBody, func(raw []byte) error {
		var ok bool
		if plain, ok = ackPlain(raw); ok {
			return nil
		}
		return decodeBytes(raw, &req)
	})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	n := len(req.Acks)
	if plain != nil {
		n = len(plain)
	} else if req.Acks == nil {
		h.writeError(w, r, badField("acks", `is required: an array of up to %d {"id","lease"}`, engine.MaxClaim))
		return
	}
	if n == 0 || n > engine.MaxClaim {
		h.writeError(w, r, badField("acks", "must hold 1 to %d acks, got %d", engine.MaxClaim, n))
		return
	}
	results := make([]ackManyResult, n)
	acks, idx := plain, []int(nil) // idx: the request's index of each of acks, when not all are there
	if plain == nil {
		acks = make([]engine.AckParams, 0, n)
		idx = make([]int, 0, n)
		for i, a := range req.Acks {
			id, err := task.ParseID(a.ID)
			if err != nil {
				results[i].Error = itemError(badField(fmt.Sprintf("acks.%d.id", i), "is not a task id: %q", a.ID))
				continue
			}
			acks = append(acks, engine.AckParams{ID: id, Lease: a.Lease})
			idx = append(idx, i)
		}
	}
	if len(acks) > 0 {
		errs, err := h.eng.AckMany(r.Context(), app, acks)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for j, err := range errs {
			if err == nil {
				continue
			}
			i := j
			if idx != nil {
				i = idx[j]
			}
			err = renumber(err, j, i)
			if status, _, _ := statusOf(err); status == http.StatusInternalServerError {
				h.log.ErrorContext(r.Context(), "ack a task", slog.String("app", app), slog.String("id", acks[j].ID.String()), slog.String("error", err.Error()))
			}
			results[i].Error = itemError(err)
		}
	}
	writeAckResults(w, results)
}

// renumber is err, a field error of the j-th ack given to the engine, as
// one of the request's i-th (the engine is not given the acks whose ids do
// not parse).
func renumber(err error, j, i int) error {
	var fe *task.FieldError
	if j == i || !errors.As(err, &fe) {
		return err
	}
	rest, ok := strings.CutPrefix(fe.Field, fmt.Sprintf("acks.%d", j))
	if !ok {
		return err
	}
	return &task.FieldError{Field: fmt.Sprintf("acks.%d%s", i, rest), Message: fe.Message}
}

func (h *Handler) nack(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		Lease   string         `json:"lease"`
		Error   string         `json:"error"`
		RetryIn *task.Duration `json:"retry_in"`
	}
	if err := decode(w, r, 64<<10, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	var retryIn *time.Duration
	if req.RetryIn != nil {
		d := req.RetryIn.Std()
		if d < 0 || d > 7*24*time.Hour {
			h.writeError(w, r, badField("retry_in", "must be between 0s and 168h"))
			return
		}
		retryIn = &d
	}
	if len(req.Error) > maxNackError {
		n := maxNackError // cut on a character boundary
		for n > 0 && !utf8.RuneStart(req.Error[n]) {
			n--
		}
		req.Error = req.Error[:n]
	}
	if err := h.authorizeID(r, id); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.eng.Nack(r.Context(), id, req.Lease, req.Error, retryIn); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
