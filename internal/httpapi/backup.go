package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/toc-dev/toc/internal/engine"
)

// errAdminOnly answers a route that reaches every app's tasks at once to
// a token that does not.
var errAdminOnly = &apiError{status: http.StatusForbidden, code: "forbidden",
	msg: "this route reaches every app's tasks: it takes an admin token"}

// requireAdmin lets through the requests of admin tokens (and every
// request when no token is configured).
func requireAdmin(r *http.Request) error {
	if !who(r.Context()).admin {
		return errAdminOnly
	}
	return nil
}

// streamIdle is how long a streamed answer may wait for its client to read
// before the connection is given up. Each write moves the deadline, so a
// long stream is not cut by the server's WriteTimeout.
const streamIdle = time.Minute

// streamWriter sends a long answer: the status and headers with its first
// write, and every write with a fresh write deadline. An error before the
// first write can still be answered as JSON (started is false); after it,
// the handler aborts the connection, so that the client sees a broken
// stream rather than a short one.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	header  func(http.Header)
	started bool
}

func newStreamWriter(w http.ResponseWriter, header func(http.Header)) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), header: header}
}

// begin sends the status and headers.
func (s *streamWriter) begin() {
	s.started = true
	s.header(s.w.Header())
	s.w.WriteHeader(http.StatusOK)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if !s.started {
		s.begin()
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamIdle)) // unsupported: the server's own timeout
	return s.w.Write(p)
}

// flush sends what is buffered.
func (s *streamWriter) flush() { _ = s.rc.Flush() }

// backup is GET /v1/admin/backup: a consistent copy of the embedded store
// as a tar stream (see engine.Transfer.Backup). Admin only; 501 in cluster mode.
func (h *Handler) backup(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	start := time.Now()
	sw := newStreamWriter(w, func(hd http.Header) {
		hd.Set("Content-Type", "application/x-tar")
		hd.Set("Content-Disposition", `attachment; filename="toc-backup-`+start.UTC().Format("20060102T150405Z")+`.tar"`)
		hd.Set("Cache-Control", "no-store")
	})
	m, err := h.eng.Transfer().Backup(r.Context(), sw)
	if err != nil {
		if !sw.started {
			if errors.Is(err, engine.ErrNoBackup) {
				err = &apiError{status: http.StatusNotImplemented, code: "not_implemented", msg: err.Error()}
			}
			h.writeError(w, r, err)
			return
		}
		h.log.ErrorContext(r.Context(), "backup stopped part way; the client gets a broken stream", slog.String("error", err.Error()))
		panic(http.ErrAbortHandler)
	}
	sw.flush()
	h.log.InfoContext(r.Context(), "backup", slog.Int("files", m.Files), slog.Int64("bytes", m.Bytes),
		slog.Duration("took", time.Since(start)))
}
