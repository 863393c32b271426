// Package httpsink delivers tasks by POSTing their payload to a URL.
package httpsink

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/task"
)

// Headers toc sets on every push.
const (
	HeaderTaskID  = "Toc-Task-Id"
	HeaderApp     = "Toc-App"
	HeaderKey     = "Toc-Key"
	HeaderAttempt = "Toc-Attempt"
	HeaderDueAt   = "Toc-Due-At"
)

// MaxResponseBody is how much of a response body is read (and kept for the
// error message of a failed attempt); the rest is discarded.
const MaxResponseBody = 4 << 10

// Config configures a Sink.
type Config struct {
	// Client sends the requests. Default: a client whose transport keeps
	// connections alive and which does not follow redirects (a redirect is a
	// failed attempt).
	Client *http.Client
	// UserAgent is sent with every push. Default "toc".
	UserAgent string
}

// Sink POSTs a task's payload to its target URL.
type Sink struct {
	client    *http.Client
	userAgent string
}

var _ sink.Sink = (*Sink)(nil)

// New returns a Sink.
func New(cfg Config) *Sink {
	c := cfg.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		c = &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	return &Sink{client: c, userAgent: cmp.Or(cfg.UserAgent, "toc")}
}

// Deliver POSTs t.Payload to t.Target.HTTP.URL with the toc headers and the
// target's own. A 2xx answer is success; anything else is an error.
func (s *Sink) Deliver(ctx context.Context, t *task.Task) error {
	h := t.Target.HTTP
	if h == nil {
		return fmt.Errorf("httpsink: task %s has no http target", t.ID)
	}
	timeout := cmp.Or(h.Timeout.Std(), task.DefaultHTTPTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(t.Payload))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Content-Type") == "" {
		if len(t.Payload) > 0 && json.Valid(t.Payload) {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
	}
	req.Header.Set("User-Agent", s.userAgent)
	req.Header.Set(HeaderTaskID, t.ID.String())
	req.Header.Set(HeaderApp, t.App)
	if t.Key != "" {
		req.Header.Set(HeaderKey, t.Key)
	}
	req.Header.Set(HeaderAttempt, strconv.Itoa(t.Attempts))
	req.Header.Set(HeaderDueAt, t.DueAt.UTC().Format(time.RFC3339Nano))

	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("POST %s: no answer within %s", h.URL, timeout)
		}
		return fmt.Errorf("POST %s: %w", h.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
	// Drain a little more so the connection can be reused; give up on huge bodies.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("POST %s: %s", h.URL, resp.Status)
		if len(bytes.TrimSpace(body)) > 0 {
			snippet := body
			if len(snippet) > 200 {
				snippet = snippet[:200]
			}
			msg += ": " + string(bytes.TrimSpace(snippet))
		}
		return &StatusError{Code: resp.StatusCode, msg: msg}
	}
	return nil
}

// StatusError is a non-2xx answer from the receiver.
type StatusError struct {
	Code int
	msg  string
}

func (e *StatusError) Error() string { return e.msg }
