package testkit_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalTB records Fatalf instead of failing.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitFor(t *testing.T) {
	n := 0
	testkit.WaitFor(t, time.Second, "three looks", func() bool { n++; return n == 3 })

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.WaitFor(f, 30*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.msg, "waiting for never") {
		t.Errorf("WaitFor on a condition that never holds: %q, want a failure naming it", f.msg)
	}
}

func TestUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if testkit.Until(ctx, func() bool { return false }) {
		t.Error("Until reported a condition that never held")
	}
	if !testkit.Until(context.Background(), func() bool { return true }) {
		t.Error("Until missed a condition that held")
	}
}

func post(t *testing.T, c *http.Client, url, body string) int {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReceiver(t *testing.T) {
	r := testkit.NewReceiver(t)
	if s := post(t, http.DefaultClient, r.HookURL(), `{"a":1}`); s != http.StatusOK {
		t.Errorf("status %d, want 200 by default", s)
	}
	r.SetStatus(http.StatusServiceUnavailable)
	if s := post(t, http.DefaultClient, r.HookURL(), `{"a":2}`); s != http.StatusServiceUnavailable {
		t.Errorf("status %d, want the 503 it was told", s)
	}
	got := r.Deliveries()
	if len(got) != 2 || string(got[0].Body) != `{"a":1}` || string(got[1].Body) != `{"a":2}` ||
		got[0].Header.Get("Content-Type") != "application/json" || got[1].At.Before(got[0].At) {
		t.Errorf("deliveries %+v, want both bodies and headers in order", got)
	}

	// Hung: the request is recorded, its client waits, Hang(false) answers it.
	r.Hang(true)
	answered := make(chan int)
	go func() { answered <- post(t, http.DefaultClient, r.HookURL(), `{"a":3}`) }()
	r.WaitCount(t, 3, 5*time.Second)
	select {
	case s := <-answered:
		t.Fatalf("a hung receiver answered %d", s)
	case <-time.After(50 * time.Millisecond): // a window in which nothing may happen
	}
	r.Hang(false)
	if s := <-answered; s != http.StatusServiceUnavailable {
		t.Errorf("released: status %d, want 503", s)
	}
	if r.Target().HTTP.URL != r.HookURL() {
		t.Errorf("Target %+v, want the hook URL", r.Target())
	}
}

// TestReceiverHangsUntilTheEnd: a request still hanging when the test ends
// does not keep the receiver from closing.
func TestReceiverHangsUntilTheEnd(t *testing.T) {
	c := &http.Client{}
	defer c.CloseIdleConnections()
	done := make(chan int, 1)
	t.Run("hung", func(t *testing.T) {
		r := testkit.NewReceiver(t)
		r.Hang(true)
		go func() { done <- post(t, c, r.HookURL(), `{}`) }()
		r.WaitCount(t, 1, 5*time.Second)
	})
	<-done // the subtest's cleanup closed the receiver
}
