package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// bulkRequest is the body of POST /v1/apps/{app}/tasks:retry and
// tasks:cancel: which of the app's tasks to change.
type bulkRequest struct {
	State     *string `json:"state"`
	KeyPrefix *string `json:"key_prefix"`
	DueAfter  *string `json:"due_after"`
	DueBefore *string `json:"due_before"`
	Limit     *int    `json:"limit"`
}

// bulkResponse answers a bulk action: how many tasks it changed, and
// whether it stopped at its limit with more to do (repeat the request).
type bulkResponse struct {
	Count int  `json:"count"`
	More  bool `json:"more,omitempty"`
}

// filter turns the request into the engine's filter. The engine checks
// what it can (state, key prefix, the window, the limit's maximum); here
// the times are parsed and a limit below 1 refused, since 0 is the
// engine's "default".
func (req *bulkRequest) filter(app string) (engine.BulkFilter, error) {
	f := engine.BulkFilter{App: app}
	if req.State != nil {
		f.State = task.State(*req.State)
	}
	if req.KeyPrefix != nil {
		f.KeyPrefix = *req.KeyPrefix
	}
	var err error
	if req.DueAfter != nil {
		if f.DueAfter, err = parseTime("due_after", *req.DueAfter); err != nil {
			return f, err
		}
	}
	if req.DueBefore != nil {
		if f.DueBefore, err = parseTime("due_before", *req.DueBefore); err != nil {
			return f, err
		}
	}
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > engine.MaxBulk {
			return f, badField("limit", "must be between 1 and %d", engine.MaxBulk)
		}
		f.Limit = *req.Limit
	}
	return f, nil
}

func (h *Handler) retryAll(w http.ResponseWriter, r *http.Request) {
	h.bulk(w, r, "retry", h.eng.Bulk().RetryAll)
}

func (h *Handler) cancelAll(w http.ResponseWriter, r *http.Request) {
	h.bulk(w, r, "cancel", h.eng.Bulk().CancelAll)
}

// bulk serves a bulk action: the token must reach the app (403), the body
// is the filter (400 naming the field), and the answer is the count.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request, name string, op func(context.Context, engine.BulkFilter) (engine.BulkResult, error)) {
	app := r.PathValue("app")
	if err := authorizeApp(r, app); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req bulkRequest
	if err := decode(w, r, 64<<10, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	f, err := req.filter(app)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	start := time.Now()
	res, err := op(r.Context(), f)
	// An operator's action on many tasks is logged, also when it stopped
	// part way: what was done stays done, and an error answer cannot say
	// how much that was.
	attrs := []any{slog.String("op", name), slog.String("app", app), slog.String("state", string(f.State)),
		slog.Int("changed", res.Count), slog.Duration("took", time.Since(start))}
	if err != nil {
		if res.Count > 0 {
			h.log.WarnContext(r.Context(), "bulk action stopped part way", append(attrs, slog.String("error", err.Error()))...)
		}
		h.writeError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "bulk action", append(attrs, slog.Bool("more", res.More))...)
	writeJSON(w, http.StatusOK, bulkResponse{Count: res.Count, More: res.More})
}
