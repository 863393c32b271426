package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// The test clock's routes (issue #27): GET /v1/admin/clock tells the
// server's time and whether it is a test clock; POST moves a test clock
// forward ({"advance":"30m"} or {"to":"…"}) and answers once everything
// due by the new time was handed to its sink (engine.AdvanceClock). Both
// take an admin token when tokens are configured.

// clockAnswer is the body of both routes' answers.
type clockAnswer struct {
	Now       time.Time `json:"now"`
	TestClock bool      `json:"test_clock"`
	Fired     *int      `json:"fired,omitempty"` // POST only
}

// clockRequest is POST /v1/admin/clock's body: one of the two.
type clockRequest struct {
	Advance string `json:"advance,omitempty"` // a Go duration, like "30m" or "1h30m"
	To      string `json:"to,omitempty"`      // RFC 3339
}

// errWallClock answers POST /v1/admin/clock on a server that runs on the
// wall clock.
var errWallClock = &apiError{status: http.StatusConflict, code: "conflict",
	msg: "this server runs on the wall clock, which only time moves; start it with `toc serve --test-clock` to move its time from tests"}

func (h *Handler) getClock(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, clockAnswer{Now: h.now().UTC(), TestClock: h.eng.TestClock()})
}

func (h *Handler) moveClock(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req clockRequest
	if err := decode(w, r, 4<<10, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if !h.eng.TestClock() {
		h.writeError(w, r, errWallClock)
		return
	}
	field := "advance"
	var to time.Time
	switch {
	case req.Advance != "" && req.To != "":
		h.writeError(w, r, &task.FieldError{Field: "to", Message: "give advance or to, not both"})
		return
	case req.Advance != "":
		d, err := time.ParseDuration(req.Advance)
		if err != nil {
			h.writeError(w, r, &task.FieldError{Field: "advance", Message: fmt.Sprintf("must be a duration like \"30m\" or \"1h30m\", got %q", req.Advance)})
			return
		}
		if d < 0 {
			h.writeError(w, r, &task.FieldError{Field: "advance", Message: fmt.Sprintf("the test clock never goes back: got %s", req.Advance)})
			return
		}
		to = h.now().Add(d)
	case req.To != "":
		field = "to"
		t, err := time.Parse(time.RFC3339Nano, req.To)
		if err != nil {
			h.writeError(w, r, &task.FieldError{Field: "to", Message: fmt.Sprintf("must be an RFC 3339 time like \"2027-03-14T09:00:00Z\", got %q", req.To)})
			return
		}
		to = t
	default:
		h.writeError(w, r, &task.FieldError{Field: "advance", Message: "give advance (a duration like \"30m\") or to (an RFC 3339 time)"})
		return
	}
	now, fired, err := h.eng.AdvanceClock(r.Context(), to)
	var back *engine.ClockBackError
	switch {
	case errors.As(err, &back):
		err = &task.FieldError{Field: field, Message: back.Error()}
	case errors.Is(err, engine.ErrWallClock):
		err = errWallClock
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, clockAnswer{Now: now.UTC(), TestClock: true, Fired: &fired})
}

// now is the engine's clock's time: a request's delay and due times count
// from it. Handlers built without an engine (tests of the HTTP layer
// alone) use the wall clock.
func (h *Handler) now() time.Time {
	if h.eng == nil {
		return time.Now()
	}
	return h.eng.Now()
}
