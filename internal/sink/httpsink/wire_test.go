package httpsink_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// eventWithin waits for an event on ch, failing the test (naming what it
// waited for) if none comes within d: the wait bounds a test that would
// otherwise hang, it does not decide what the test finds.
func eventWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		var zero T
		return zero
	}
}

// TestWireHeaders: what a receiver gets, header for header and byte for
// byte, with a fixed clock: the values recorded before the sink built its
// requests itself (a golden copy), for the default client, under Guard,
// and with a client of the caller's.
func TestWireHeaders(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	rc.SetStatus(http.StatusNoContent)
	host := strings.TrimPrefix(rc.URL, "http://")
	now := time.Unix(1767225600, 123456789)
	secrets := func(app string) []string {
		return map[string][]string{"billing": {"", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "old-plain"}}[app]
	}
	want := map[string]string{
		"Accept-Encoding":   "gzip",
		"Authorization":     "Bearer abc",
		"Content-Length":    "12",
		"Content-Type":      "application/json",
		"Toc-App":           "billing",
		"Toc-Attempt":       "3",
		"Toc-Due-At":        "2026-01-01T00:00:00.5Z",
		"Toc-Key":           "order-42",
		"Toc-Schedule-Id":   "07000000000000000000000000",
		"Toc-Signature":     "t=1767225600,v1=1b4e5f0f13418726c469fc7523cc927575f74c0245df149f898320d470a64985",
		"Toc-Task-Id":       "01080000000000000000000000",
		"User-Agent":        "toc",
		"Webhook-Id":        "01080000000000000000000000",
		"Webhook-Signature": "v1,rLOT6r9ZREAluLGw8NQvUNkMyVHURBCffSJXmZx+Nig= v1,5fjMzTn5EBeVF2mfUK35R8dd0HVVgG9Fgk401yTVkmQ=",
		"Webhook-Timestamp": "1767225600",
		"X-Host":            host,
		"X-Lower":           "1",
	}
	mk := func() *task.Task {
		return &task.Task{
			ID: task.ID{1, 2}, App: "billing", Key: "order-42", ScheduleID: task.ID{7}, Attempts: 3,
			DueAt:   time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC),
			Payload: []byte(`{"order":42}`),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: rc.URL + "/hook?x=1", Headers: map[string]string{
				"authorization": "Bearer abc", "x-lower": "1", "Toc-App": "spoofed",
			}}},
		}
	}
	pushes := 0
	for name, cfg := range map[string]httpsink.Config{
		"default client": {},
		"guard":          {Guard: func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }},
		"own client":     {Client: &http.Client{}},
	} {
		cfg.Secrets = secrets
		cfg.Clock = clock.NewTest(now)
		s := newSink(t, cfg)
		if err := s.Deliver(context.Background(), mk()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := rc.Nth(t, pushes, within)
		pushes++
		h := p.Header.Clone()
		h.Set("X-Host", p.Host) // the Host header, which Header leaves out
		var diffs []string
		for k := range h {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("unexpected %s: %q", k, h[k]))
			}
		}
		for k, v := range want {
			if g := h.Values(k); len(g) != 1 || g[0] != v {
				diffs = append(diffs, fmt.Sprintf("%s = %q, want %q", k, g, v))
			}
		}
		sort.Strings(diffs)
		for _, d := range diffs {
			t.Errorf("%s: %s", name, d)
		}
		if string(p.Body) != `{"order":42}` {
			t.Errorf("%s: body %q", name, p.Body)
		}
	}
}

// TestBasicAuthFromURL: a user and password in the target URL are sent as
// Basic authorization, unless the target sets an Authorization header of
// its own, with every client.
func TestBasicAuthFromURL(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	u := strings.Replace(rc.URL, "http://", "http://us%20er:p%40ss@", 1) + "/hook"
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("us er:p@ss"))
	pushes := 0
	for name, cfg := range map[string]httpsink.Config{
		"default client": {},
		"guard":          {Guard: func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }},
		"own client":     {Client: &http.Client{}},
	} {
		s := newSink(t, cfg)
		for _, tt := range []struct {
			headers map[string]string
			want    string
		}{
			{want: basic},
			{headers: map[string]string{"authorization": "Bearer t"}, want: "Bearer t"},
		} {
			tk := newTask("billing", u, "x")
			tk.Target.HTTP.Headers = tt.headers
			if err := s.Deliver(context.Background(), tk); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			p := rc.Nth(t, pushes, within)
			pushes++
			if got := p.Header.Values("Authorization"); len(got) != 1 || got[0] != tt.want {
				t.Errorf("%s, target headers %v: Authorization %q, want %q", name, tt.headers, got, tt.want)
			}
		}
	}
}

// TestRedirectNotFollowed: a redirect is a failed attempt; the push is
// not sent again to where it points, with the default client and Guard's.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	elsewhere := testkit.NewReceiver(t)
	rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, elsewhere.URL+"/stolen", http.StatusTemporaryRedirect)
	}})
	pushes := 0
	for name, cfg := range map[string]httpsink.Config{
		"default client": {},
		"guard":          {Guard: func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }},
	} {
		s := newSink(t, cfg)
		err := s.Deliver(context.Background(), newTask("billing", rc.URL+"/hook", "x"))
		var se *httpsink.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusTemporaryRedirect {
			t.Errorf("%s: Deliver = %v, want a 307 *StatusError", name, err)
		}
		rc.Nth(t, pushes, within)
		pushes++
	}
	if n := elsewhere.Count(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

// TestConnectionReusedAfterAnswer: a connection goes back to the pool
// after every answer, a 2xx with a body and a non-2xx with a long body
// (the sink reads them to their end; a connection whose answer is not read
// to its end is closed), so pushes one after another use one connection.
func TestConnectionReusedAfterAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
	}{
		{"204", http.StatusNoContent, ""},
		{"200 with a body", http.StatusOK, strings.Repeat("ok ", 1000)},
		{"500 with a body longer than what the error keeps", http.StatusInternalServerError, strings.Repeat("x", 3*httpsink.MaxResponseBody)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}})
			s := newSink(t, httpsink.Config{})
			idle := make(chan error, 1)
			reused := make(chan bool, 1)
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn:     func(i httptrace.GotConnInfo) { reused <- i.Reused },
				PutIdleConn: func(err error) { idle <- err },
			})
			const pushes = 5
			for i := range pushes {
				err := s.Deliver(ctx, newTask("billing", rc.URL+"/hook", "x"))
				if (err == nil) != (tt.status < 300) {
					t.Fatalf("push %d: Deliver = %v", i, err)
				}
				rc.Nth(t, i, within)
				if r := eventWithin(t, reused, 10*time.Second, "connection"); r != (i > 0) {
					t.Errorf("push %d: connection reused %v", i, r)
				}
				// The transport pools the connection once the answer is read
				// to its end (for a 204, before Deliver returns).
				if err := eventWithin(t, idle, 10*time.Second, "connection back in the pool (the answer was not read to its end)"); err != nil {
					t.Fatalf("push %d: the connection was not pooled: %v", i, err)
				}
			}
			if n := rc.Conns(); n != 1 {
				t.Errorf("%d pushes one after another took %d connections, want 1", pushes, n)
			}
		})
	}
}

// TestPoolHoldsInFlight: with as many pushes under way at once as the
// pool is sized for (Config.MaxIdleConnsPerHost), round after round, the
// connections of the first round serve every later one: none is closed for
// want of room in the pool and dialled again.
func TestPoolHoldsInFlight(t *testing.T) {
	t.Parallel()
	const inFlight, rounds = 16, 4
	arrived := make(chan struct{}, inFlight)
	proceed := make(chan struct{}, inFlight)
	rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-proceed // until all of the round are in flight
		w.WriteHeader(http.StatusNoContent)
	}})
	s := newSink(t, httpsink.Config{MaxIdleConnsPerHost: inFlight})
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Go(func() {
				errs <- s.Deliver(context.Background(), newTask("billing", rc.URL+"/hook", "x"))
			})
		}
		for range inFlight {
			eventWithin(t, arrived, 10*time.Second, "push of the round")
		}
		for range inFlight {
			proceed <- struct{}{}
		}
		wg.Wait()
		for range inFlight {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
	}
	if n := rc.Conns(); n != inFlight {
		t.Errorf("%d rounds of %d pushes at once took %d connections, want %d", rounds, inFlight, n, inFlight)
	}
}

// TestHTTPSToPlainHTTP: an https:// target whose server speaks plain HTTP
// fails with net/http's own explanation, with every client.
func TestHTTPSToPlainHTTP(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	u := strings.Replace(rc.URL, "http://", "https://", 1) + "/hook"
	for name, cfg := range map[string]httpsink.Config{
		"default client": {},
		"guard":          {Guard: func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }},
		"own client":     {Client: &http.Client{}},
	} {
		err := newSink(t, cfg).Deliver(context.Background(), newTask("billing", u, "x"))
		if !errors.Is(err, http.ErrSchemeMismatch) {
			t.Errorf("%s: Deliver = %v, want http.ErrSchemeMismatch", name, err)
		}
	}
}
