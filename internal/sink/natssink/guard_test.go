package natssink

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestGuardRefusesServerNotAllowed: a target url the operator did not
// allow goes through the address guard, which refuses a loopback address
// before any connection is made; the error hides the password.
func TestGuardRefusesServerNotAllowed(t *testing.T) {
	t.Parallel()
	ln := testsvc.QuietListener(t)
	s := newSink(t, Config{
		Resolve: func(app, u string) (string, bool, error) { return u, false, nil },
		Guard:   func(string) netguard.Policy { return netguard.Policy{} },
	})
	err := s.Deliver(t.Context(), newTask("shop", task.NATSTarget{URL: "nats://toc:s3cret@" + ln.Addr().String(), Subject: "x"}))
	var be *netguard.BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("got %v, want a *netguard.BlockedError", err)
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "allowed_brokers") {
		t.Errorf("error %q: want no password and a pointer to allowed_brokers", err)
	}
	testsvc.NoConnection(t, ln, 200*time.Millisecond)
}

// TestGuardedAndAllowedConnections: a server allowed to one app and not to
// another is reached by the first and refused to the second, which does not
// get the first one's connection; the guard's policy decides for a server
// that is not allowed; a broker name resolves to its URL.
func TestGuardedAndAllowedConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err != nil || !ip.IsLoopback() {
		t.Skipf("the test server %s is not on a loopback address", redact(b.url))
	}
	s := newSink(t, Config{
		Resolve: func(app, ref string) (string, bool, error) {
			switch {
			case ref == "main":
				return b.url, app == "ops", nil
			case ref == "nope":
				return "", false, errors.New(`"nope" is not the name of a broker of this server`)
			}
			return ref, app == "ops", nil
		},
		Guard: func(app string) netguard.Policy { return netguard.Policy{AllowPrivate: app == "internal"} },
	})
	target := task.NATSTarget{URL: b.url, Subject: b.subject}
	if err := s.Deliver(t.Context(), newTask("ops", target)); err != nil {
		t.Fatalf("allowed server: %v", err)
	}
	var be *netguard.BlockedError
	if err := s.Deliver(t.Context(), newTask("shop", target)); !errors.As(err, &be) {
		t.Fatalf("the same server, not allowed to shop: got %v, want a *netguard.BlockedError", err)
	}
	if err := s.Deliver(t.Context(), newTask("internal", target)); err != nil {
		t.Fatalf("not allowed, but the app's policy allows private addresses: %v", err)
	}
	named := task.NATSTarget{URL: "main", Subject: b.subject}
	if err := s.Deliver(t.Context(), newTask("ops", named)); err != nil {
		t.Fatalf("allowed server by name: %v", err)
	}
	if err := s.Deliver(t.Context(), newTask("shop", named)); !errors.As(err, &be) {
		t.Fatalf("server by name, not allowed to shop: got %v, want a *netguard.BlockedError", err)
	}
	if err := s.Deliver(t.Context(), newTask("ops", task.NATSTarget{URL: "nope", Subject: b.subject})); err == nil || !strings.Contains(err.Error(), "not the name of a broker") {
		t.Fatalf("unknown name: got %v", err)
	}
	if got := len(b.msgs(t)); got != 3 {
		t.Errorf("%d messages in the stream, want 3", got)
	}
	s.mu.Lock()
	n := len(s.mu.conns)
	s.mu.Unlock()
	if n != 2 {
		t.Errorf("%d connections, want 2: the allowed one, and one under the internal app's policy", n)
	}
}
