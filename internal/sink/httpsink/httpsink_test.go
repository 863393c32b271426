package httpsink_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// within bounds the wait for a push that must arrive: a test that would
// otherwise hang fails instead.
const within = 10 * time.Second

func newSink(t *testing.T, cfg httpsink.Config) *httpsink.Sink {
	t.Helper()
	s := httpsink.New(cfg)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func newTask(app, url string, payload string) *task.Task {
	return &task.Task{
		ID:      task.ID{1},
		App:     app,
		Payload: []byte(payload),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: url}},
		DueAt:   time.Now(),
	}
}

func TestDeliver(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	s := newSink(t, httpsink.Config{})
	tk := newTask("billing", rc.URL+"/expire", `{"order":42}`)
	tk.Key = "order-42"
	tk.ScheduleID = task.ID{7}
	tk.Target.HTTP.Headers = map[string]string{"X-Extra": "1"}
	if err := s.Deliver(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	p := rc.Nth(t, 0, within)
	for k, want := range map[string]string{
		httpsink.HeaderTaskID:     tk.ID.String(),
		httpsink.HeaderApp:        "billing",
		httpsink.HeaderKey:        "order-42",
		httpsink.HeaderScheduleID: tk.ScheduleID.String(),
		"Content-Type":            "application/json",
		"X-Extra":                 "1",
		"User-Agent":              "toc",
	} {
		if got := p.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// A task that is no schedule's occurrence has no schedule header.
	if err := s.Deliver(context.Background(), newTask("billing", rc.URL, "")); err != nil {
		t.Fatal(err)
	}
	if p := rc.Nth(t, 1, within); p.Header.Get(httpsink.HeaderScheduleID) != "" || p.Header.Get(httpsink.HeaderKey) != "" {
		t.Errorf("a plain task's push has %s %q", httpsink.HeaderScheduleID, p.Header.Get(httpsink.HeaderScheduleID))
	}
	if p.Header.Get(httpsink.HeaderSignature) != "" {
		t.Errorf("unsigned sink sent %s", httpsink.HeaderSignature)
	}
	if string(p.Body) != `{"order":42}` {
		t.Errorf("body %q", p.Body)
	}
}

func TestDeliverNon2xx(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Error(w, strings.Repeat("x", 10<<10), http.StatusBadGateway)
	}})
	s := newSink(t, httpsink.Config{})
	err := s.Deliver(context.Background(), newTask("billing", rc.URL, ""))
	var se *httpsink.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadGateway {
		t.Fatalf("Deliver = %v, want a 502 *StatusError", err)
	}
	if len(err.Error()) > 400 {
		t.Errorf("error message is %d bytes; the body snippet is not capped", len(err.Error()))
	}
}

// TestSignedPush: a receiver verifies the real push with client.Verify.
func TestSignedPush(t *testing.T) {
	t.Parallel()
	secrets := map[string][]string{"billing": {"new", "old"}, "skips-empty": {"", "only"}}
	verdict := make(chan error, 1)
	rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, body []byte) {
		err := client.Verify(secrets[r.Header.Get(httpsink.HeaderApp)], r.Header, body, 0)
		verdict <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}})
	s := newSink(t, httpsink.Config{Secrets: func(app string) []string { return secrets[app] }})

	payload := "\x00binary\xff payload"
	tk := newTask("billing", rc.URL, payload)
	tk.Attempts = 3
	if err := s.Deliver(context.Background(), tk); err != nil {
		t.Fatalf("signed push refused: %v", err)
	}
	if err := <-verdict; err != nil {
		t.Fatal(err)
	}
	p := rc.Nth(t, 0, within)
	if got := p.Header.Get(httpsink.HeaderAttempt); got != "3" {
		t.Errorf("%s = %q, want 3", httpsink.HeaderAttempt, got)
	}
	// Signed with the first secret: it verifies with that one alone, not
	// with the second alone.
	if err := client.Verify([]string{"new"}, p.Header, p.Body, 0); err != nil {
		t.Errorf("not signed with the first secret: %v", err)
	}
	if err := client.Verify([]string{"old"}, p.Header, p.Body, 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("verified with the second secret alone: %v", err)
	}
	if err := client.Verify([]string{"new"}, p.Header, []byte(payload+"!"), 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("tampered body: %v", err)
	}
	// The signature covers the task id and the attempt sent.
	for name, change := range map[string]func(h http.Header){
		"another task id": func(h http.Header) { h.Set(httpsink.HeaderTaskID, task.ID{2}.String()) },
		"another attempt": func(h http.Header) { h.Set(httpsink.HeaderAttempt, "4") },
		"no task id":      func(h http.Header) { h.Del(httpsink.HeaderTaskID) },
		"no attempt":      func(h http.Header) { h.Del(httpsink.HeaderAttempt) },
	} {
		h := p.Header.Clone()
		change(h)
		if err := client.Verify([]string{"new"}, h, p.Body, 0); !errors.Is(err, client.ErrBadSignature) {
			t.Errorf("%s: %v, want %v", name, err, client.ErrBadSignature)
		}
	}

	if err := s.Deliver(context.Background(), newTask("skips-empty", rc.URL, "x")); err != nil {
		t.Errorf("push signed after an empty secret: %v", err)
	}
	<-verdict
	rc.Nth(t, 1, within)

	// An app without secrets is not signed, and the receiver says so.
	err := s.Deliver(context.Background(), newTask("other", rc.URL, "x"))
	if v := <-verdict; !errors.Is(v, client.ErrNoSignature) && v != nil {
		t.Errorf("unsigned push: receiver says %v", v)
	}
	if p := rc.Nth(t, 2, within); p.Header.Get(httpsink.HeaderSignature) != "" {
		t.Errorf("app without secrets signed: %q", p.Header.Get(httpsink.HeaderSignature))
	}
	if err == nil {
		t.Error("receiver accepted an unsigned push")
	}
}

// TestSignedPushNotReplayable: the pushes of two tasks with the same body,
// or of two attempts of one task, do not verify as each other.
func TestSignedPushNotReplayable(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	s := newSink(t, httpsink.Config{Secrets: func(string) []string { return []string{"s1"} }})
	a, b := newTask("billing", rc.URL, `{"same":1}`), newTask("billing", rc.URL, `{"same":1}`)
	b.ID = task.ID{2}
	a2 := newTask("billing", rc.URL, `{"same":1}`)
	a2.Attempts = 1
	var got []testkit.Delivery
	for i, tk := range []*task.Task{a, b, a2} {
		if err := s.Deliver(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		got = append(got, rc.Nth(t, i, within))
	}
	for i, p := range got {
		if err := client.Verify([]string{"s1"}, p.Header, p.Body, 0); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	// Push a's signature with b's (or a2's) headers, as a replay would be.
	for _, other := range got[1:] {
		h := other.Header.Clone()
		h.Set(httpsink.HeaderSignature, got[0].Header.Get(httpsink.HeaderSignature))
		if err := client.Verify([]string{"s1"}, h, other.Body, 0); !errors.Is(err, client.ErrBadSignature) {
			t.Errorf("task %s attempt %s verified with the signature of task %s attempt %s: %v",
				h.Get(httpsink.HeaderTaskID), h.Get(httpsink.HeaderAttempt),
				got[0].Header.Get(httpsink.HeaderTaskID), got[0].Header.Get(httpsink.HeaderAttempt), err)
		}
	}
}

// TestHeaderNames: receivers read the signed headers by client's names.
func TestHeaderNames(t *testing.T) {
	t.Parallel()
	if httpsink.HeaderTaskID != client.HeaderTaskID || httpsink.HeaderAttempt != client.HeaderAttempt {
		t.Errorf("httpsink sends %s and %s, client verifies %s and %s",
			httpsink.HeaderTaskID, httpsink.HeaderAttempt, client.HeaderTaskID, client.HeaderAttempt)
	}
}

// TestDeliverRedactsPassword: a password in the target URL, or a token in
// its query, never shows in an error, which becomes the task's last error.
func TestDeliverRedactsPassword(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-pw"
	withPassword := func(base string) string {
		return strings.Replace(base, "http://", "http://user:"+secret+"@", 1)
	}

	// A closed port on loopback: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	failing := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Error(w, "no", http.StatusInternalServerError)
	}})
	slow := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		<-r.Context().Done()
	}})
	s := newSink(t, httpsink.Config{})
	tests := []struct {
		name, url string
		prefix    string // of the error message
	}{
		{name: "connection refused", url: withPassword(closed) + "/hook", prefix: "POST http://user:xxxxx@" + ln.Addr().String() + "/hook: "},
		{name: "non-2xx", url: withPassword(failing.URL) + "/hook", prefix: "POST http://user:xxxxx@"},
		{name: "timeout", url: withPassword(slow.URL), prefix: "POST http://user:xxxxx@"},
		{name: "malformed URL", url: withPassword(closed) + "/%zz", prefix: "build request for POST http://xxxxx@"},
		{name: "token in the query", url: closed + "/hook?app=1&token=" + secret, prefix: "POST http://" + ln.Addr().String() + "/hook?app=xxxxx&token=xxxxx: "},
		{name: "token in the query, non-2xx", url: failing.URL + "/hook?token=" + secret, prefix: "POST http://127.0.0.1:"},
		{name: "token in a malformed URL's query", url: closed + "/%zz?token=" + secret, prefix: "build request for POST http://" + ln.Addr().String() + "/%zz?xxxxx"},
		{name: "malformed URL, password with a slash", url: "http://user:" + secret + "/x@" + ln.Addr().String() + "/", prefix: "build request for POST http://xxxxx@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask("billing", tt.url, "x")
			tk.Target.HTTP.Timeout = task.Duration(100 * time.Millisecond)
			err := s.Deliver(context.Background(), tk)
			if err == nil {
				t.Fatal("Deliver = nil, want an error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the secret: %q", err)
			}
			if !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("error %q, want it to start with %q", err, tt.prefix)
			}
		})
	}
}

func TestGuard(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	port := rc.Listener.Addr().(*net.TCPAddr).Port
	byName := "http://receiver.test:" + strconv.Itoa(port) + "/hook"
	res := resolverFunc(func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if host == "receiver.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	policies := map[string]netguard.Policy{
		"strict":     {},
		"private":    {AllowPrivate: true},
		"by-address": {AllowedHosts: []string{"127.0.0.1"}},
		"by-name":    {AllowedHosts: []string{"receiver.test"}},
	}
	s := newSink(t, httpsink.Config{
		Guard:    func(app string) netguard.Policy { return policies[app] },
		Resolver: res,
	})
	tests := []struct {
		app, url string
		wantOK   bool
	}{
		{"strict", rc.URL, false},
		{"strict", byName, false},
		{"private", rc.URL, true},
		{"private", byName, true},
		{"by-address", rc.URL, true},
		{"by-address", byName, true}, // resolves to the allowed address
		{"by-name", byName, true},
		{"by-name", rc.URL, false},
		{"unknown-app", rc.URL, false}, // the zero policy
	}
	arrived := 0 // pushes that must have arrived so far
	for _, tt := range tests {
		err := s.Deliver(context.Background(), newTask(tt.app, tt.url, "x"))
		if tt.wantOK {
			if err != nil {
				t.Errorf("%s → %s: %v", tt.app, tt.url, err)
			} else {
				rc.Nth(t, arrived, within)
				arrived++
			}
			continue
		}
		var be *netguard.BlockedError
		if !errors.As(err, &be) {
			t.Errorf("%s → %s: %v, want a *netguard.BlockedError", tt.app, tt.url, err)
			continue
		}
		if !strings.Contains(err.Error(), "allow_private_targets") || !strings.HasPrefix(err.Error(), "POST "+tt.url+": connect to ") {
			t.Errorf("%s → %s: error %q does not say what to do", tt.app, tt.url, err)
		}
	}
	if got := rc.Deliveries(); len(got) > arrived {
		t.Errorf("a refused push arrived: %v", got[arrived].Header)
	}
}

// TestGuardPoolsPerPolicy: a connection opened under a permissive policy
// is never reused for an app with a strict one, while an app reuses its
// own connections.
func TestGuardPoolsPerPolicy(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	policies := map[string]netguard.Policy{
		"open":      {AllowPrivate: true},
		"also-open": {AllowPrivate: true},
		"strict":    {},
	}
	s := newSink(t, httpsink.Config{Guard: func(app string) netguard.Policy { return policies[app] }})
	for i := range 3 {
		if err := s.Deliver(context.Background(), newTask("open", rc.URL, "x")); err != nil {
			t.Fatal(err)
		}
		rc.Nth(t, i, within)
	}
	if n := rc.Conns(); n != 1 {
		t.Errorf("3 pushes of one app took %d connections, want 1 (reuse)", n)
	}
	// An idle connection to the receiver is now pooled.
	var be *netguard.BlockedError
	if err := s.Deliver(context.Background(), newTask("strict", rc.URL, "x")); !errors.As(err, &be) {
		t.Fatalf("strict app after an open one: %v, want a *netguard.BlockedError", err)
	}
	if err := s.Deliver(context.Background(), newTask("also-open", rc.URL, "x")); err != nil {
		t.Fatal(err)
	}
	rc.Nth(t, 3, within)
	if n := rc.Conns(); n != 1 {
		t.Errorf("an app with the same policy took a new connection (%d in all)", n)
	}
}

// TestGuardIgnoresProxy: with a guard, pushes go straight to the target,
// so the check sees the target's address and not the proxy's.
func TestGuardIgnoresProxy(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	tr := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) {
		return url.Parse("http://127.0.0.1:1") // nothing listens there
	}}
	s := newSink(t, httpsink.Config{
		Client: &http.Client{Transport: tr},
		Guard:  func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} },
	})
	if err := s.Deliver(context.Background(), newTask("a", rc.URL, "x")); err != nil {
		t.Fatal(err)
	}
	rc.Nth(t, 0, within)
}

func TestGuardNeedsHTTPTransport(t *testing.T) {
	t.Parallel()
	guard := func(string) netguard.Policy { return netguard.Policy{} }
	for name, c := range map[string]*http.Client{
		"custom RoundTripper": {Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("no") })},
		"DialTLSContext": {Transport: &http.Transport{DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no")
		}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			httpsink.New(httpsink.Config{Client: c, Guard: guard})
		}()
	}
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestErrorCutOnCharacter: a long error answer is cut to 200 bytes on a
// character boundary, so the task's last error stays valid UTF-8.
func TestErrorCutOnCharacter(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "x"+strings.Repeat("é", 300)) // 'é' is 2 bytes: byte 200 is inside one
	}})
	s := newSink(t, httpsink.Config{})
	err := s.Deliver(context.Background(), newTask("billing", rc.URL+"/hook", "x"))
	if err == nil {
		t.Fatal("Deliver = nil, want the 502")
	}
	if msg := err.Error(); !utf8.ValidString(msg) || !strings.HasSuffix(msg, ": x"+strings.Repeat("é", 99)) {
		t.Errorf("error %q: want valid UTF-8 ending with the body's first 199 bytes", msg)
	}
}

// TestDeliverOneWrite: a push's request, headers and payload, goes out in
// one write to the connection. net/http flushes the headers in a write of
// their own before a body of a type it does not know to be in memory (a
// bytes.Reader, in an io.NopCloser or not): a body type of the sink's own
// cost a second write, a second packet and a second read at the receiver
// per push.
func TestDeliverOneWrite(t *testing.T) {
	t.Parallel()
	rc := testkit.NewReceiver(t)
	var mu sync.Mutex
	writes := 0
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, func() { mu.Lock(); writes++; mu.Unlock() }}, nil
	}}
	defer tr.CloseIdleConnections()
	s := newSink(t, httpsink.Config{Client: &http.Client{Transport: tr}})
	if err := s.Deliver(context.Background(), newTask("billing", rc.URL+"/expire", `{"order":42}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if writes != 1 {
		t.Errorf("the push took %d writes to the connection, want 1", writes)
	}
}

// countingConn calls wrote after each Write.
type countingConn struct {
	net.Conn
	wrote func()
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote()
	return n, err
}
