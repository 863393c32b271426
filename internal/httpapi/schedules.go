package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// Schedules (recurring timers): the routes of /v1/schedules and
// /v1/apps/{app}/schedules. Bodies are decoded as task bodies are (one
// pass, exact names, unknown fields refused), and tokens reach schedules
// as they reach tasks: another app's schedule answers 404, exactly as one
// that does not exist.

// errNoSchedule is the answer for an unknown schedule, and for one the
// token cannot reach.
var errNoSchedule = &apiError{status: http.StatusNotFound, code: "not_found", msg: "no such schedule"}

// errNoScheduleStore answers when the backend keeps no schedules (every
// backend of toc does; a test's store may not).
var errNoScheduleStore = &apiError{status: http.StatusNotImplemented, code: "not_implemented",
	msg: "this server's store keeps no schedules"}

// scheduleErr turns the engine's answers about a schedule into the API's:
// a schedule that is not there is "no such schedule", not "no such task";
// an app at its max_schedules is 409 "max_schedules".
func scheduleErr(err error) error {
	var sl *engine.ScheduleLimitError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoSchedule
	case errors.Is(err, engine.ErrNoSchedules):
		return errNoScheduleStore
	case errors.As(err, &sl):
		return &apiError{status: http.StatusConflict, code: "max_schedules", msg: sl.Error()}
	}
	return err
}

func (h *Handler) writeScheduleError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeError(w, r, scheduleErr(err))
}

// scheduleRequest is the body of POST /v1/schedules.
type scheduleRequest struct {
	App           string            `json:"app"`
	Key           string            `json:"key"`
	Cron          *string           `json:"cron"`
	Every         *task.Duration    `json:"every"`
	Timezone      *string           `json:"timezone"`
	StartAt       *string           `json:"start_at"`
	EndAt         *string           `json:"end_at"`
	CatchUp       *string           `json:"catch_up"`
	Payload       jsontext.Value    `json:"payload"`
	PayloadBase64 *string           `json:"payload_base64"`
	Target        *task.Target      `json:"target"`
	Retry         *task.RetryPolicy `json:"retry"`
	DeadlineAfter *task.Duration    `json:"deadline_after"`
}

// checkEvery refuses an every given as zero or less, which the rule would
// read as "no every" and answer about cron.
func checkEvery(d *task.Duration) error {
	if d != nil && d.Std() < task.MinEvery {
		return badField("every", "must be at least %s, got %s", task.MinEvery, d.Std())
	}
	return nil
}

func (req *scheduleRequest) schedule() (*task.Schedule, error) {
	s := &task.Schedule{App: req.App, Key: req.Key}
	if err := task.ValidateApp(req.App); err != nil {
		return nil, err
	}
	if req.Cron != nil {
		s.Cron = *req.Cron
	}
	if err := checkEvery(req.Every); err != nil {
		return nil, err
	}
	if req.Every != nil {
		s.Every = *req.Every
	}
	if req.Timezone != nil {
		s.Timezone = *req.Timezone
	}
	for _, f := range []struct {
		name string
		in   *string
		out  **time.Time
	}{{"start_at", req.StartAt, &s.StartAt}, {"end_at", req.EndAt, &s.EndAt}} {
		if f.in == nil {
			continue
		}
		t, err := parseTime(f.name, *f.in)
		if err != nil {
			return nil, err
		}
		*f.out = &t
	}
	if req.CatchUp != nil {
		s.CatchUp = task.CatchUp(*req.CatchUp)
	}
	var err error
	if s.Payload, _, err = payloadOf(req.Payload, req.PayloadBase64); err != nil {
		return nil, err
	}
	if req.Target != nil { // else the app's default target, if it has one
		s.Target = *req.Target
	}
	if req.Retry != nil {
		s.Retry = *req.Retry
	}
	if req.DeadlineAfter != nil {
		s.DeadlineAfter = *req.DeadlineAfter
	}
	return s, nil
}

func (h *Handler) createSchedule(w http.ResponseWriter, r *http.Request) {
	var req scheduleRequest
	if err := decode(w, r, h.maxBody, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := req.schedule()
	if err == nil {
		err = authorizeApp(r, s.App)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	s.TraceParent, s.TraceState = telemetry.FromRequest(r) // each occurrence is created in it
	got, created, err := h.eng.Schedules().Create(r.Context(), s)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	status := http.StatusOK // the existing schedule of the key, unchanged
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, got)
}

// schedulePathID parses the {id} path segment of a schedule route.
func schedulePathID(r *http.Request) (task.ID, error) {
	id, err := task.ParseID(r.PathValue("id"))
	if err != nil {
		return id, errNoSchedule
	}
	return id, nil
}

// reachSchedule returns the schedule of the {id} path segment if the
// request's token reaches its app: otherwise "no such schedule".
func (h *Handler) reachSchedule(r *http.Request) (*task.Schedule, error) {
	id, err := schedulePathID(r)
	if err != nil {
		return nil, err
	}
	s, err := h.eng.Schedules().Get(r.Context(), id)
	if err != nil {
		return nil, scheduleErr(err)
	}
	if !who(r.Context()).can(s.App) {
		return nil, errNoSchedule
	}
	return s, nil
}

func (h *Handler) getSchedule(w http.ResponseWriter, r *http.Request) {
	s, err := h.reachSchedule(r)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) getScheduleByKey(w http.ResponseWriter, r *http.Request) {
	app, key := r.PathValue("app"), r.PathValue("key")
	if authorizeApp(r, app) != nil {
		h.writeError(w, r, errNoSchedule)
		return
	}
	s, err := h.eng.Schedules().GetByKey(r.Context(), app, key)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request) {
	app := r.PathValue("app")
	if err := authorizeApp(r, app); err != nil {
		h.writeError(w, r, err)
		return
	}
	after, limit, err := pageParams(r.URL.Query())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ss, next, err := h.eng.Schedules().List(r.Context(), app, after, limit)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Schedules  []*task.Schedule `json:"schedules"`
		NextCursor string           `json:"next_cursor,omitempty"`
	}{nonNil(ss), nextCursor(next)})
}

// schedulePatchRequest is the body of PATCH /v1/schedules/{id}. start_at,
// end_at and deadline_after may be null, which clears them.
type schedulePatchRequest struct {
	Cron          *string           `json:"cron"`
	Every         *task.Duration    `json:"every"`
	Timezone      *string           `json:"timezone"`
	StartAt       jsontext.Value    `json:"start_at"`
	EndAt         jsontext.Value    `json:"end_at"`
	CatchUp       *string           `json:"catch_up"`
	Payload       jsontext.Value    `json:"payload"`
	PayloadBase64 *string           `json:"payload_base64"`
	Target        *task.Target      `json:"target"`
	Retry         *task.RetryPolicy `json:"retry"`
	DeadlineAfter jsontext.Value    `json:"deadline_after"`
}

// nullableTime reads a PATCH time field: absent (nil, false), null
// (nil, true) or an RFC 3339 time.
func nullableTime(field string, v jsontext.Value) (*time.Time, bool, error) {
	switch {
	case v == nil:
		return nil, false, nil
	case string(v) == "null":
		return nil, true, nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return nil, false, badField(field, "must be an RFC 3339 time or null")
	}
	t, err := parseTime(field, s)
	if err != nil {
		return nil, false, err
	}
	return &t, false, nil
}

func (req *schedulePatchRequest) patch() (engine.SchedulePatch, error) {
	p := engine.SchedulePatch{Cron: req.Cron, Timezone: req.Timezone, Target: req.Target, Retry: req.Retry}
	if req.Cron != nil && req.Every != nil {
		return p, badField("cron", "give exactly one of cron and every")
	}
	if err := checkEvery(req.Every); err != nil {
		return p, err
	}
	p.Every = req.Every
	var err error
	if p.StartAt, p.ClearStartAt, err = nullableTime("start_at", req.StartAt); err != nil {
		return p, err
	}
	if p.EndAt, p.ClearEndAt, err = nullableTime("end_at", req.EndAt); err != nil {
		return p, err
	}
	if req.CatchUp != nil {
		c := task.CatchUp(*req.CatchUp)
		p.CatchUp = &c
	}
	payload, set, err := payloadOf(req.Payload, req.PayloadBase64)
	if err != nil {
		return p, err
	}
	if set {
		p.Payload = &payload
	}
	switch {
	case req.DeadlineAfter == nil:
	case string(req.DeadlineAfter) == "null":
		p.DeadlineAfter = new(task.Duration)
	default:
		var d task.Duration
		if json.Unmarshal(req.DeadlineAfter, &d) != nil {
			return p, badField("deadline_after", `must be a Go duration like "10m", or null`)
		}
		p.DeadlineAfter = &d
	}
	if p == (engine.SchedulePatch{}) {
		return p, &apiError{status: http.StatusBadRequest, code: "invalid_field",
			msg: "nothing to change: give cron, every, timezone, start_at, end_at, catch_up, payload, target, retry or deadline_after"}
	}
	return p, nil
}

func (h *Handler) patchSchedule(w http.ResponseWriter, r *http.Request) {
	if _, err := schedulePathID(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req schedulePatchRequest
	if err := decode(w, r, h.maxBody, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p, err := req.patch()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := h.reachSchedule(r)
	if err == nil {
		s, err = h.eng.Schedules().Patch(r.Context(), s.ID, p)
	}
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	h.setPaused(w, r, h.eng.Schedules().Pause)
}

func (h *Handler) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	h.setPaused(w, r, h.eng.Schedules().Resume)
}

func (h *Handler) setPaused(w http.ResponseWriter, r *http.Request, op func(context.Context, task.ID) (*task.Schedule, error)) {
	s, err := h.reachSchedule(r)
	if err == nil {
		s, err = op(r.Context(), s.ID)
	}
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	s, err := h.reachSchedule(r)
	if err == nil {
		err = h.eng.Schedules().Delete(r.Context(), s.ID)
	}
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) deleteScheduleByKey(w http.ResponseWriter, r *http.Request) {
	app, key := r.PathValue("app"), r.PathValue("key")
	if authorizeApp(r, app) != nil {
		h.writeError(w, r, errNoSchedule)
		return
	}
	if err := h.eng.Schedules().DeleteByKey(r.Context(), app, key); err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nextTimesDefault is n when GET /v1/schedules/{id}/next does not give it.
const nextTimesDefault = 5

func (h *Handler) nextTimes(w http.ResponseWriter, r *http.Request) {
	n := nextTimesDefault
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > engine.MaxNextTimes {
			h.writeError(w, r, badField("n", "must be a number between 1 and %d, got %q", engine.MaxNextTimes, s))
			return
		}
		n = v
	}
	s, err := h.reachSchedule(r)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	times, err := h.eng.Schedules().NextTimes(r.Context(), s.ID, n)
	if err != nil {
		h.writeScheduleError(w, r, err)
		return
	}
	// Each in the schedule's zone: RFC 3339 with the zone's offset.
	out := make([]string, len(times))
	for i, t := range times {
		out[i] = t.Format(time.RFC3339Nano)
	}
	writeJSON(w, http.StatusOK, map[string][]string{"times": out})
}
