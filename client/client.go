package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toc-dev/toc/task"
)

// BaseURLDefault is the server a [Client] talks to when [Config.BaseURL] is
// empty: toc's default listen address.
const BaseURLDefault = "http://127.0.0.1:7070"

// Config configures a [Client]. The zero value is ready to use.
type Config struct {
	// BaseURL is the server's root URL, like "https://toc.internal:7070".
	// A path is kept as a prefix ("https://host/toc" sends requests to
	// "https://host/toc/v1/..."). Default [BaseURLDefault].
	BaseURL string

	// HTTPClient sends the requests. Default [http.DefaultClient], which has
	// no timeout: bound each call with its context instead. If you set
	// Timeout, make it longer than the longest [ClaimRequest.Wait] you use.
	HTTPClient *http.Client

	// Token, when set, is sent with every request as
	// "Authorization: Bearer <Token>".
	Token string
}

// Client talks to a toc server over its HTTP API. It is safe for concurrent
// use. Every method that sends a request takes a context that bounds it.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// New returns a client for cfg, with defaults filled in. It does not contact
// the server; a malformed BaseURL is reported by the first call.
func New(cfg Config) *Client {
	return &Client{
		base:  strings.TrimRight(cmp.Or(cfg.BaseURL, BaseURLDefault), "/"),
		hc:    cmp.Or(cfg.HTTPClient, http.DefaultClient),
		token: cfg.Token,
	}
}

// ScheduleRequest is the body of a create. Give at most one of DueAt and
// Delay, at most one of Payload and PayloadBase64, and exactly one target.
// Zero fields are left out of the request, so the server's defaults apply.
type ScheduleRequest struct {
	// App names the application the task belongs to; required.
	App string `json:"app"`
	// Key makes the create idempotent: while a task of App with this key
	// exists, creating another returns that task with created false.
	Key string `json:"key,omitempty"`

	// DueAt is when the task fires.
	DueAt *time.Time `json:"due_at,omitempty"`
	// Delay is how long from the server's now the task fires. When DueAt is
	// nil it is always sent, so a request with neither fires at once.
	Delay task.Duration `json:"delay,omitempty"`
	// Deadline is when the task expires if it has not been delivered.
	Deadline *time.Time `json:"deadline,omitempty"`

	// Payload is a JSON value delivered as these bytes. It must be valid
	// JSON; send anything else as PayloadBase64.
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBase64 is a payload of any bytes; it travels base64-encoded.
	PayloadBase64 []byte `json:"payload_base64,omitempty"`

	// Target says how the task is delivered: task.Target{HTTP: ...} or
	// task.Target{Pull: &task.PullTarget{}}.
	Target task.Target `json:"target"`
	// Retry overrides the server's retry policy; zero fields keep defaults.
	Retry *task.RetryPolicy `json:"retry,omitempty"`
}

// MarshalJSON writes the create body: the fields with their JSON names,
// zero ones left out, except Delay which is sent whenever DueAt is nil.
func (r ScheduleRequest) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, r.jsonSize()))
}

// appendJSON appends the create body to b, by hand: a batch of 1000 took
// a producer more CPU in encoding/json's reflection than the server took
// to decode it. The bytes are those json.Marshal writes for the request's
// fields (app to retry in their order, then delay, as MarshalJSON wrote
// them when it hid Delay behind a field of its own): FuzzScheduleRequestJSON
// holds the two to the same output. A string or payload that json.Marshal
// would change (escapes, spaces) goes through json.Marshal.
func (r *ScheduleRequest) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = appendJSONString(append(b, `{"app":`...), r.App)
	if r.Key != "" {
		b = appendJSONString(append(b, `,"key":`...), r.Key)
	}
	if r.DueAt != nil {
		if b, err = appendJSONTime(append(b, `,"due_at":`...), *r.DueAt); err != nil {
			return nil, err
		}
	}
	if r.Deadline != nil {
		if b, err = appendJSONTime(append(b, `,"deadline":`...), *r.Deadline); err != nil {
			return nil, err
		}
	}
	if len(r.Payload) > 0 {
		b = append(b, `,"payload":`...)
		if plainJSON(r.Payload) {
			b = append(b, r.Payload...)
		} else {
			p, err := json.Marshal(r.Payload) // compacts and escapes it, or says why it is not JSON
			if err != nil {
				return nil, err
			}
			b = append(b, p...)
		}
	}
	if len(r.PayloadBase64) > 0 {
		b = append(b, `,"payload_base64":"`...)
		b = append(base64.StdEncoding.AppendEncode(b, r.PayloadBase64), '"')
	}
	b = r.Target.AppendJSON(append(b, `,"target":`...))
	if r.Retry != nil {
		b = r.Retry.AppendJSON(append(b, `,"retry":`...))
	}
	if r.DueAt == nil || r.Delay != 0 {
		b = append(b, `,"delay":"`...)
		b = append(append(b, time.Duration(r.Delay).String()...), '"')
	}
	return append(b, '}'), nil
}

// jsonSize is about the bytes of appendJSON's output, to size a buffer.
func (r *ScheduleRequest) jsonSize() int {
	n := 160 + len(r.App) + len(r.Key) + len(r.Payload) + len(r.PayloadBase64)*4/3
	if r.Target.HTTP != nil {
		n += len(r.Target.HTTP.URL)
	}
	return n
}

// appendJSONString appends s as json.Marshal writes a string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendJSONTime appends t as json.Marshal writes a time.Time.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	b, err := t.AppendText(append(b, '"'))
	if err != nil {
		return nil, fmt.Errorf("json: error calling MarshalJSON for type time.Time: %w", err)
	}
	return append(b, '"'), nil
}

// plainJSON reports whether p is valid JSON that json.Marshal copies as
// it is: nothing to compact (no whitespace between tokens) and nothing
// it escapes (<, >, & and U+2028/U+2029, whose UTF-8 starts with 0xE2).
func plainJSON(p []byte) bool {
	for _, c := range p {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return json.Valid(p)
}

// PatchRequest changes a scheduled task. Fields left zero are not changed.
// Give at most one of DueAt and Delay, of Payload and PayloadBase64, and of
// Deadline and ClearDeadline.
type PatchRequest struct {
	// DueAt moves the task to fire at this time.
	DueAt *time.Time `json:"due_at,omitempty"`
	// Delay moves the task to fire this long from the server's now.
	Delay task.Duration `json:"delay,omitempty"`
	// Deadline sets a new deadline.
	Deadline *time.Time `json:"deadline,omitempty"`
	// ClearDeadline removes the deadline (sent as "deadline": null).
	ClearDeadline bool `json:"-"`
	// Payload replaces the payload with a JSON value.
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBase64 replaces the payload with any bytes.
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
}

// MarshalJSON writes the patch body: the fields set, and "deadline": null
// for ClearDeadline.
func (r PatchRequest) MarshalJSON() ([]byte, error) {
	if r.ClearDeadline && r.Deadline != nil {
		return nil, errors.New("give Deadline or ClearDeadline, not both")
	}
	type plain PatchRequest // its fields, not this method
	w := struct {
		plain
		Deadline any `json:"deadline,omitempty"` // hides plain's
	}{plain: plain(r)}
	switch {
	case r.ClearDeadline:
		w.Deadline = json.RawMessage("null")
	case r.Deadline != nil:
		w.Deadline = r.Deadline
	}
	return json.Marshal(w)
}

// ClaimRequest asks for due pull tasks. Zero fields take the server's
// defaults.
type ClaimRequest struct {
	// Max is the most tasks to return.
	Max int `json:"max,omitempty"`
	// Lease is how long the caller has to ack or nack each task before it
	// is given to another consumer.
	Lease task.Duration `json:"lease,omitempty"`
	// Wait is how long the server may hold the request when no task is
	// due (long polling). Zero answers at once.
	Wait task.Duration `json:"wait,omitempty"`
}

// NackRequest reports a failed attempt at a claimed task.
type NackRequest struct {
	// Lease is the task's lease token, from the claim; required.
	Lease string `json:"lease"`
	// Error says what went wrong; it becomes the task's last_error.
	Error string `json:"error,omitempty"`
	// RetryIn asks for the next attempt after this long instead of the
	// task's backoff. Zero keeps the backoff.
	RetryIn task.Duration `json:"retry_in,omitempty"`
}

// BatchResult is the outcome of one request of [Client.ScheduleBatch]:
// either Task (created or, with the same app and key, existing) or Err.
type BatchResult struct {
	Task    *task.Task
	Created bool
	// Err is an *Error when the server refused this request. Its Status is
	// 0: the batch as a whole succeeded.
	Err error
}

// ListOptions pages through [Client.List]. A nil *ListOptions asks for the
// first page at the server's default size.
type ListOptions struct {
	// Limit is the most tasks per page; 0 takes the server's default.
	Limit int
	// Cursor is a previous page's NextCursor; "" starts at the beginning.
	Cursor string
}

// ListPage is one page of [Client.List].
type ListPage struct {
	Tasks []*task.Task `json:"tasks"`
	// NextCursor fetches the next page; "" on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Schedule creates a task. created is false when a task of the same app and
// key already existed; t is then that task, unchanged.
func (c *Client) Schedule(ctx context.Context, req ScheduleRequest) (t *task.Task, created bool, err error) {
	in, err := req.MarshalJSON() // compact already: no json.Marshal to compact it again
	if err != nil {
		return nil, false, fmt.Errorf("toc: encode POST /v1/tasks: %w", err)
	}
	t = new(task.Task)
	status, err := c.do(ctx, http.MethodPost, "/v1/tasks", nil, rawBody(in), t)
	if err != nil {
		return nil, false, err
	}
	return t, status == http.StatusCreated, nil
}

// ScheduleBatch creates up to 1000 tasks in one request and one durable
// write. The results are in the order of reqs. A request the server refuses
// fails alone, in its result's Err; the error returned is for the batch as a
// whole. An empty reqs sends nothing.
func (c *Client) ScheduleBatch(ctx context.Context, reqs []ScheduleRequest) ([]BatchResult, error) {
	return c.scheduleBatch(ctx, reqs, nil)
}

// ScheduleBatchMinimal is [Client.ScheduleBatch] for producers that read
// nothing back: the server answers each task with its id alone ("Prefer:
// return=minimal"), which spares it and this client the encoding of every
// task. Each result's Task has only its ID set.
func (c *Client) ScheduleBatchMinimal(ctx context.Context, reqs []ScheduleRequest) ([]BatchResult, error) {
	return c.scheduleBatch(ctx, reqs, http.Header{"Prefer": {"return=minimal"}})
}

func (c *Client) scheduleBatch(ctx context.Context, reqs []ScheduleRequest, hdr http.Header) ([]BatchResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	in, err := batchBody(reqs)
	if err != nil {
		return nil, fmt.Errorf("toc: encode POST /v1/tasks:batch: %w", err)
	}
	var resp batchAnswer
	if _, err := c.doWith(ctx, http.MethodPost, "/v1/tasks:batch", nil, hdr, in, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(reqs) {
		return nil, fmt.Errorf("toc: batch of %d tasks answered with %d results", len(reqs), len(resp.Results))
	}
	out := make([]BatchResult, len(reqs))
	for i, r := range resp.Results {
		switch {
		case r.Error != nil:
			out[i].Err = &Error{Code: r.Error.Code, Message: r.Error.Message, Field: r.Error.Field}
		case r.Task != nil:
			out[i] = BatchResult{Task: r.Task, Created: r.Created}
		default:
			return nil, fmt.Errorf("toc: batch result %d has neither task nor error", i)
		}
	}
	return out, nil
}

// Get returns the task with this id; [IsNotFound] when there is none.
func (c *Client) Get(ctx context.Context, id task.ID) (*task.Task, error) {
	return c.task(ctx, http.MethodGet, taskPath(id, ""), nil)
}

// GetByKey returns app's task with this key; [IsNotFound] when there is
// none. Any key is escaped for the URL, including "/", "." and "..".
func (c *Client) GetByKey(ctx context.Context, app, key string) (*task.Task, error) {
	p, err := keyPath(app, key)
	if err != nil {
		return nil, err
	}
	return c.task(ctx, http.MethodGet, p, nil)
}

// Patch changes a scheduled task and returns it as changed. A task that is
// not scheduled any more answers [IsConflict], with the task in the *Error.
func (c *Client) Patch(ctx context.Context, id task.ID, req PatchRequest) (*task.Task, error) {
	return c.task(ctx, http.MethodPatch, taskPath(id, ""), req)
}

// Cancel cancels a scheduled task. A task being delivered or finished
// answers [IsConflict], with the task in the *Error; an unknown id
// [IsNotFound].
func (c *Client) Cancel(ctx context.Context, id task.ID) error {
	_, err := c.do(ctx, http.MethodDelete, taskPath(id, ""), nil, nil, nil)
	return err
}

// CancelByKey cancels app's task with this key, as [Client.Cancel].
func (c *Client) CancelByKey(ctx context.Context, app, key string) error {
	p, err := keyPath(app, key)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodDelete, p, nil, nil, nil)
	return err
}

// List returns one page of app's tasks in state, oldest first. state ""
// leaves the filter to the server. Pass the page's NextCursor in
// opts.Cursor for the next page, until it is "".
func (c *Client) List(ctx context.Context, app string, state task.State, opts *ListOptions) (*ListPage, error) {
	if app == "" {
		return nil, errors.New("toc: list: app is required")
	}
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	if opts != nil {
		if opts.Limit > 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
		if opts.Cursor != "" {
			q.Set("cursor", opts.Cursor)
		}
	}
	page := new(ListPage)
	if _, err := c.do(ctx, http.MethodGet, "/v1/apps/"+pathSegment(app)+"/tasks", q, nil, page); err != nil {
		return nil, err
	}
	return page, nil
}

// Retry schedules a dead or expired task again, now, and returns it. Any
// other state answers [IsConflict].
func (c *Client) Retry(ctx context.Context, id task.ID) (*task.Task, error) {
	return c.task(ctx, http.MethodPost, taskPath(id, "/retry"), nil)
}

// BulkFilter selects an app's tasks for [Client.RetryAll] and
// [Client.CancelAll]. Fields left zero do not filter, except State.
type BulkFilter struct {
	// State is the state of the tasks to change; required: [task.Dead] or
	// [task.Expired] for RetryAll, [task.Scheduled] for CancelAll.
	State task.State `json:"state"`
	// KeyPrefix keeps the tasks whose key starts with it.
	KeyPrefix string `json:"key_prefix,omitempty"`
	// DueAfter keeps the tasks due at or after it (their original due_at).
	DueAfter *time.Time `json:"due_after,omitempty"`
	// DueBefore keeps the tasks due before it.
	DueBefore *time.Time `json:"due_before,omitempty"`
	// Limit is the most tasks one call changes; 0 takes the server's
	// maximum (100,000).
	Limit int `json:"limit,omitempty"`
}

// BulkResult is what one bulk call did.
type BulkResult struct {
	// Count is the number of tasks changed.
	Count int `json:"count"`
	// More says the call stopped at its limit: call again to go on (the
	// next call may find none left).
	More bool `json:"more,omitempty"`
}

// RetryAll retries every dead or expired task of app that f matches, as
// [Client.Retry] does one, in one request. Calling it again is safe:
// retried tasks are no longer in f.State. When the result has More, call
// again for the rest.
func (c *Client) RetryAll(ctx context.Context, app string, f BulkFilter) (BulkResult, error) {
	return c.bulk(ctx, app, "retry", f)
}

// CancelAll cancels every scheduled task of app that f matches, as
// [Client.Cancel] does one; f.State must be [task.Scheduled]. It returns as
// [Client.RetryAll] does.
func (c *Client) CancelAll(ctx context.Context, app string, f BulkFilter) (BulkResult, error) {
	return c.bulk(ctx, app, "cancel", f)
}

func (c *Client) bulk(ctx context.Context, app, op string, f BulkFilter) (BulkResult, error) {
	var res BulkResult
	if app == "" {
		return res, fmt.Errorf("toc: %s all: app is required", op)
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/apps/"+pathSegment(app)+"/tasks:"+op, nil, f, &res)
	return res, err
}

// Claim takes due pull tasks of app. Each returned task carries its Lease
// token and Attempts; ack or nack it before the lease runs out. It returns
// an empty slice when nothing was due within req.Wait.
func (c *Client) Claim(ctx context.Context, app string, req ClaimRequest) ([]*task.Task, error) {
	if app == "" {
		return nil, errors.New("toc: claim: app is required")
	}
	var resp claimAnswer
	if _, err := c.do(ctx, http.MethodPost, "/v1/apps/"+pathSegment(app)+"/claim", nil, req, &resp); err != nil {
		return nil, err
	}
	return resp.Tasks, nil
}

// Ack reports a claimed task delivered. [IsConflict] means the lease is no
// longer current (it ran out, and the task may have gone to another
// consumer).
func (c *Client) Ack(ctx context.Context, id task.ID, lease string) error {
	in := struct {
		Lease string `json:"lease"`
	}{lease}
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/ack"), nil, in, nil)
	return err
}

// AckItem is one task of [Client.AckMany]: its id and the lease token its
// claim returned.
type AckItem struct {
	ID    task.ID `json:"id"`
	Lease string  `json:"lease"`
}

// AckMany reports up to 1000 claimed tasks of app delivered, in one request
// and one durable write on the server, as [Client.Ack] does each. The
// errors are in the order of acks, nil for a task acked, else an *Error
// with the Status a single Ack would have had: [IsConflict] when the lease
// is no longer current, [IsNotFound] when app has no task with the id (a
// task of another app included), 400 naming the item's field (like
// "acks.3.lease") for a bad item or an id given twice. The error returned
// is for the request as a whole (nothing was acked). An empty acks sends
// nothing.
func (c *Client) AckMany(ctx context.Context, app string, acks []AckItem) ([]error, error) {
	if app == "" {
		return nil, errors.New("toc: ack many: app is required")
	}
	if len(acks) == 0 {
		return nil, nil
	}
	var resp ackAnswer
	if _, err := c.do(ctx, http.MethodPost, "/v1/apps/"+pathSegment(app)+"/tasks:ack", nil, rawBody(appendAcks(nil, acks)), &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(acks) {
		return nil, fmt.Errorf("toc: ack of %d tasks answered with %d results", len(acks), len(resp.Results))
	}
	errs := make([]error, len(acks))
	for i, r := range resp.Results {
		if e := r.Error; e != nil {
			errs[i] = &Error{Status: statusOfCode(e.Code), Code: e.Code, Message: e.Message, Field: e.Field}
		}
	}
	return errs, nil
}

// appendAcks appends the body of tasks:ack for acks, {"acks":[…]}, as
// json.Marshal writes it: a consumer acks up to a thousand tasks a
// request, and json.Marshal's reflection (and an id's MarshalText, a
// string each) cost more than the ack's own bytes.
func appendAcks(b []byte, acks []AckItem) []byte {
	b = slices.Grow(b, 12+len(acks)*(len(`{"id":"","lease":""},`)+26+24))
	b = append(b, `{"acks":[`...)
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b, _ = a.ID.AppendText(append(b, `{"id":"`...)) // an id always encodes
		b = appendJSONString(append(b, `","lease":`...), a.Lease)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// ackAnswer is the answer to tasks:ack: one result per ack, {} when it was
// delivered. The answer the server writes when every ack was, nearly
// always, is read without encoding/json.
type ackAnswer struct {
	Results []struct {
		Error *apiError `json:"error"`
	} `json:"results"`
}

func (a *ackAnswer) decodeBody(b []byte) error {
	if list, ok := member(b, "results"); ok && len(list) >= 2 && list[0] == '[' && list[len(list)-1] == ']' {
		// [{},{},…,{}]: 3 bytes each but the last.
		if n := (len(list) - 2 + 1) / 3; 3*n-1 == len(list)-2 && n > 0 {
			all := true
			for i := 1; i < len(list)-1; i += 3 {
				if list[i] != '{' || list[i+1] != '}' || i+2 < len(list)-1 && list[i+2] != ',' {
					all = false
					break
				}
			}
			if all {
				a.Results = make([]struct {
					Error *apiError `json:"error"`
				}, n)
				return nil
			}
		}
	}
	type plain ackAnswer // its fields, not decodeBody
	return json.NewDecoder(bytes.NewReader(b)).Decode((*plain)(a))
}

// Nack reports a failed attempt at a claimed task; the task is retried by
// its policy or goes dead. [IsConflict] as for [Client.Ack].
func (c *Client) Nack(ctx context.Context, id task.ID, req NackRequest) error {
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/nack"), nil, req, nil)
	return err
}

// Healthy returns nil when the server answers /healthz with success: the
// process is up.
func (c *Client) Healthy(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil)
	return err
}

// Ready returns nil when the server answers /readyz with success: it can
// serve requests (its store is open).
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
	return err
}

func (c *Client) task(ctx context.Context, method, path string, in any) (*task.Task, error) {
	t := new(task.Task)
	if _, err := c.do(ctx, method, path, nil, in, t); err != nil {
		return nil, err
	}
	return t, nil
}

func taskPath(id task.ID, suffix string) string {
	return "/v1/tasks/" + id.String() + suffix
}

func keyPath(app, key string) (string, error) {
	if app == "" {
		return "", errors.New("toc: app is required")
	}
	if key == "" {
		return "", errors.New("toc: key is required")
	}
	return "/v1/apps/" + pathSegment(app) + "/keys/" + pathSegment(key), nil
}

// pathSegment escapes s as one path segment. "." and ".." are escaped as
// well, or servers (and Go's ServeMux) would clean them out of the path.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// do sends one request with in as its JSON body (none when nil), and decodes
// a 2xx answer into out (ignored when nil). Other answers become *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	return c.doWith(ctx, method, path, query, nil, in, out)
}

// doWith is do with headers of the caller's (hdr, nil for none) as well.
func (c *Client) doWith(ctx context.Context, method, path string, query url.Values, hdr http.Header, in, out any) (int, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, ok := in.(rawBody)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				return 0, fmt.Errorf("toc: encode %s %s: %w", method, path, err)
			}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("toc: %w", err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "toc-go-client")
	if in != nil || method == http.MethodPost || method == http.MethodPatch {
		// Also without a body: a server without tokens takes a POST only
		// as JSON (so that web pages cannot send one).
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() {
		// Drain a little so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, decodeError(resp)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := decodeAnswer(resp, out); err != nil {
			return resp.StatusCode, fmt.Errorf("toc: decode answer to %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// rawBody is a request body already encoded (doWith sends it as it is).
type rawBody []byte

// wholeDecoder is an answer that is read whole and decoded by its own
// decodeBody, which gives what encoding/json would (its fast path, for the
// answers of many tasks, falls back to encoding/json for anything else).
type wholeDecoder interface {
	decodeBody(b []byte) error
}

// maxPresize bounds the buffer made from an answer's Content-Length.
const maxPresize = 16 << 20

// decodeAnswer decodes a 2xx answer's body into out.
func decodeAnswer(resp *http.Response, out any) error {
	wd, ok := out.(wholeDecoder)
	if t, isTask := out.(*task.Task); isTask {
		// A task reads itself by hand (Task.UnmarshalJSON): read whole, it
		// is spared encoding/json's scan of it first.
		wd, ok = (*taskAnswer)(t), true
	}
	if !ok {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	buf := answerBufs.Get().(*bytes.Buffer)
	defer putAnswerBuf(buf)
	if n := resp.ContentLength; n > 0 && n <= maxPresize {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	return wd.decodeBody(buf.Bytes())
}

// answerBufs keep the buffers answers are read whole into, from one
// answer to the next: a claim's answer of 1000 tasks is about 650 KB, made
// afresh for each claim (a tenth of what a pull consumer and toc together
// allocated per task in toc bench's pull burst). The decoders copy what
// they keep (strings, payloads), so nothing decoded points into a buffer
// given back (TestDecodeAnswerKeepsNothingOfItsBuffer).
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer bounds the buffers kept in answerBufs.
const maxPooledAnswer = 4 << 20

// putAnswerBuf empties buf and keeps it for the next answer, unless it
// grew past maxPooledAnswer.
func putAnswerBuf(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledAnswer {
		return
	}
	buf.Reset()
	answerBufs.Put(buf)
}

// taskAnswer is an answer of one task, read whole.
type taskAnswer task.Task

func (a *taskAnswer) decodeBody(b []byte) error { return (*task.Task)(a).UnmarshalJSON(b) }

// member returns X when b is exactly {"name":X} (whitespace around it
// aside), the form the server writes an answer of one member in.
func member(b []byte, name string) ([]byte, bool) {
	b = bytes.TrimSpace(b)
	prefix := len(`{"`) + len(name) + len(`":`)
	if len(b) < prefix+1 || b[0] != '{' || b[1] != '"' || string(b[2:2+len(name)]) != name ||
		string(b[2+len(name):prefix]) != `":` || b[len(b)-1] != '}' {
		return nil, false
	}
	return b[prefix : len(b)-1], true
}

// claimAnswer is the answer to a claim: its tasks are read by hand
// (task.DecodeList) when they have the form the server writes.
type claimAnswer struct {
	Tasks []*task.Task `json:"tasks"`
}

func (a *claimAnswer) decodeBody(b []byte) error {
	if list, ok := member(b, "tasks"); ok {
		if ts, ok := task.DecodeList(list); ok {
			a.Tasks = ts
			return nil
		}
	}
	type plain claimAnswer // its fields, not decodeBody
	return json.NewDecoder(bytes.NewReader(b)).Decode((*plain)(a))
}

// batchItem is one result of a batch create.
type batchItem struct {
	Task    *task.Task `json:"task"`
	Created bool       `json:"created"`
	Error   *apiError  `json:"error"`
}

// batchAnswer is the answer to a batch create: a minimal one (each task
// its id alone) is read by hand.
type batchAnswer struct {
	Results []batchItem `json:"results"`
}

func (a *batchAnswer) decodeBody(b []byte) error {
	if list, ok := member(b, "results"); ok {
		if rs, ok := minimalResults(list); ok {
			a.Results = rs
			return nil
		}
	}
	type plain batchAnswer // its fields, not decodeBody
	return json.NewDecoder(bytes.NewReader(b)).Decode((*plain)(a))
}

// minimalResults reads [{"task":{"id":"…"},"created":true},…], the
// results of a minimal batch answer exactly as the server writes them,
// and reports whether b had that form.
func minimalResults(b []byte) ([]batchItem, bool) {
	const (
		head = `{"task":{"id":"`
		mid  = `"},"created":`
	)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	b = b[1 : len(b)-1]
	// At most this many results (each "true}" and a comma but the last):
	// the tasks are cut from one array, not allocated one by one.
	most := (len(b) + 1) / (len(head) + 26 + len(mid) + len("true}") + 1)
	rs := make([]batchItem, 0, most)
	tasks := make([]task.Task, 0, most)
	for len(b) > 0 {
		if len(rs) > 0 {
			if b[0] != ',' {
				return nil, false
			}
			b = b[1:]
		}
		if len(b) < len(head)+26+len(mid) || string(b[:len(head)]) != head {
			return nil, false
		}
		b = b[len(head):]
		var id task.ID
		if id.UnmarshalText(b[:26]) != nil || string(b[26:26+len(mid)]) != mid {
			return nil, false
		}
		b = b[26+len(mid):]
		var created bool
		switch {
		case bytes.HasPrefix(b, []byte("true}")):
			created, b = true, b[len("true}"):]
		case bytes.HasPrefix(b, []byte("false}")):
			b = b[len("false}"):]
		default:
			return nil, false
		}
		tasks = append(tasks, task.Task{ID: id})
		rs = append(rs, batchItem{Task: &tasks[len(tasks)-1], Created: created})
	}
	return rs, true
}

// batchBody is {"tasks":[reqs…]} as json.Marshal writes it, but for
// compacting again what each MarshalJSON wrote compact already.
func batchBody(reqs []ScheduleRequest) (rawBody, error) {
	size := len(`{"tasks":[]}`)
	for i := range reqs {
		size += 1 + reqs[i].jsonSize()
	}
	in := append(make(rawBody, 0, size), `{"tasks":[`...)
	for i := range reqs {
		if i > 0 {
			in = append(in, ',')
		}
		var err error
		if in, err = reqs[i].appendJSON(in); err != nil {
			return nil, err
		}
	}
	return append(in, "]}"...), nil
}
