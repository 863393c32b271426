// Package reqlog gives every HTTP request an id and logs one line for it.
//
// [RequestID] takes the id from the X-Request-Id header (when it is a sane
// token) or makes one, sends it back in X-Request-Id, puts it in the
// request's context ([ID] reads it) and logs method, path, status, duration
// and request_id when the request ends. [NewHandler] wraps a slog.Handler
// so that every record logged with such a context (logger.InfoContext(ctx,
// …)) carries the request_id too.
package reqlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"
)

// Header is the request and response header that carries the id.
const Header = "X-Request-Id"

// maxIDLen bounds an id taken from a request.
const maxIDLen = 128

type idKey struct{}

// ID returns the request id in ctx, or "".
func ID(ctx context.Context) string {
	id, _ := ctx.Value(idKey{}).(string)
	return id
}

// WithID returns ctx carrying the request id.
func WithID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, idKey{}, id)
}

// RequestID wraps next: each request gets an id (its X-Request-Id when
// that is 1 to 128 of [A-Za-z0-9._:-], else 16 random hex digits), echoed
// in the response's X-Request-Id and kept in the context, and one log line
// at Info when it ends (Debug for the health probes GET /healthz and
// /readyz, which would drown the rest). log nil means slog.Default().
func RequestID(next http.Handler, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(Header)
		if !validID(id) {
			id = newID()
		}
		w.Header().Set(Header, id)
		ctx := WithID(r.Context(), id)
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		status := rec.status
		if status == 0 {
			status = http.StatusOK // the handler wrote nothing
		}
		level := slog.LevelInfo
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			level = slog.LevelDebug
		}
		log.LogAttrs(ctx, level, "request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", rec.bytes),
			slog.String("request_id", id))
	})
}

func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// recorder notes the status and size of a response. Unwrap lets
// http.ResponseController reach the writer's Flush and deadlines.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// NewHandler wraps h so that records logged with a request's context carry
// its request_id.
func NewHandler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if id := ID(ctx); id != "" && !hasID(r) {
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// hasID reports whether r already carries a request_id (RequestID's own
// line does).
func hasID(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == "request_id"
		return !found
	})
	return found
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h.Handler.WithAttrs(as)} }
func (h handler) WithGroup(name string) slog.Handler    { return handler{h.Handler.WithGroup(name)} }
