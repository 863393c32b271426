package httpapi

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// ExportCountTrailer is the trailer of an export's answer: how many lines
// (tasks and schedules) the stream holds. A stream cut short has no
// trailer, or a count above what arrived.
const ExportCountTrailer = "Toc-Export-Count"

// export is GET /v1/admin/export: every task (of ?app, in ?state) as
// NDJSON, one task per line exactly as GET /v1/tasks/{id} answers it, then
// (without ?state) every schedule (of ?app), one per line as
// {"schedule": <as GET /v1/schedules/{id} answers it>}. Admin only.
func (h *Handler) export(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := engine.ExportFilter{App: q.Get("app"), State: task.State(q.Get("state"))}
	if q.Has("app") {
		if err := task.ValidateApp(f.App); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	if q.Has("state") && !f.State.Valid() {
		h.writeError(w, r, badField("state", "must be one of %v, got %q", task.States, f.State))
		return
	}
	start := time.Now()
	sw := newStreamWriter(w, func(hd http.Header) {
		hd.Set("Content-Type", "application/x-ndjson")
		hd.Set("Cache-Control", "no-store")
		hd.Set("Trailer", ExportCountTrailer)
	})
	bw := bufio.NewWriterSize(sw, 64<<10)
	n, err := h.eng.Transfer().Export(r.Context(), f, func(t *task.Task) error {
		return writeLine(bw, t) // as writeJSON answers GET /v1/tasks/{id}
	})
	var ns int
	if err == nil && f.State == "" {
		ns, err = h.eng.Transfer().ExportSchedules(r.Context(), f.App, func(s *task.Schedule) error {
			return writeLine(bw, ExportedSchedule{Schedule: s})
		})
		n += ns
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		if !sw.started {
			h.writeError(w, r, err)
			return
		}
		h.log.ErrorContext(r.Context(), "export stopped part way; the client gets a broken stream",
			slog.Int("tasks", n), slog.String("error", err.Error()))
		panic(http.ErrAbortHandler)
	}
	if !sw.started { // no task: the headers still go out
		sw.begin()
	}
	w.Header().Set(ExportCountTrailer, strconv.Itoa(n))
	h.log.InfoContext(r.Context(), "export", slog.String("app", f.App), slog.String("state", string(f.State)),
		slog.Int("tasks", n-ns), slog.Int("schedules", ns), slog.Duration("took", time.Since(start)))
}

// ExportedSchedule is a schedule's line of an export.
type ExportedSchedule struct {
	Schedule *task.Schedule `json:"schedule"`
}

// writeLine writes v's JSON and a newline.
func writeLine(bw *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.WriteByte('\n')
}
