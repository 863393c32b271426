package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// Issue #27: toc serve --test-clock, driven through the real binary.

var clockT0 = time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC)

// clockHooks is a webhook receiver that records each push's Toc-Due-At
// and webhook-timestamp, answering status.
type clockHooks struct {
	*httptest.Server
	mu     sync.Mutex
	dues   []time.Time
	stamps []int64
	status int
}

func newClockHooks(t *testing.T, status int) *clockHooks {
	h := &clockHooks{status: status}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		due, err := time.Parse(time.RFC3339Nano, r.Header.Get("Toc-Due-At"))
		if err != nil {
			t.Errorf("push without a Toc-Due-At: %v", r.Header)
		}
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		h.mu.Lock()
		h.dues = append(h.dues, due)
		h.stamps = append(h.stamps, ts)
		h.mu.Unlock()
		w.WriteHeader(h.status)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *clockHooks) got() ([]time.Time, []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.dues), slices.Clone(h.stamps)
}

// startClockChild starts toc serve on a test clock at clockT0 (or start),
// with an app "shop" that signs its pushes.
func startClockChild(t *testing.T, extra ...string) (*child, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	writeConfig(t, cfg, "apps:\n  shop:\n    signing_secrets: [a-signing-secret-of-some-length]\n")
	args := append([]string{"--config", cfg, "--test-clock=" + clockT0.Format(time.RFC3339)}, extra...)
	c := startChild(t, filepath.Join(dir, "data"), args...)
	return c, c.client()
}

func advance(t *testing.T, cl *client.Client, d time.Duration) client.ClockState {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := cl.AdvanceClock(ctx, d)
	if err != nil {
		t.Fatalf("advance %s: %v", d, err)
	}
	return s
}

func TestTestClockFiresOnAdvanceNotBefore(t *testing.T) {
	_, cl := startClockChild(t)
	h := newClockHooks(t, http.StatusOK)
	s, err := cl.Clock(t.Context())
	if err != nil || !s.TestClock || !s.Now.Equal(clockT0) {
		t.Fatalf("GET clock: %+v, %v; want the test clock at %s", s, err, clockT0)
	}
	tk, _, err := cl.Schedule(t.Context(), client.ScheduleRequest{App: "shop", Key: "order-1",
		Delay: task.Duration(30 * time.Minute), Target: task.Target{HTTP: &task.HTTPTarget{URL: h.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	if !tk.CreatedAt.Equal(clockT0) || !tk.DueAt.Equal(clockT0.Add(30*time.Minute)) {
		t.Fatalf("created_at %s, due_at %s; want %s and 30m later", tk.CreatedAt, tk.DueAt, clockT0)
	}
	if s := advance(t, cl, 30*time.Minute-time.Millisecond); s.Fired != 0 || !s.Now.Equal(clockT0.Add(30*time.Minute-time.Millisecond)) {
		t.Fatalf("advance 29m59.999s: %+v, want nothing fired", s)
	}
	if dues, _ := h.got(); len(dues) != 0 {
		t.Fatalf("pushed before its due time: %v", dues)
	}
	if s := advance(t, cl, time.Millisecond); s.Fired != 1 {
		t.Fatalf("advance to 30m: %+v, want one fired", s)
	}
	dues, stamps := h.got()
	if len(dues) != 1 || !dues[0].Equal(clockT0.Add(30*time.Minute)) {
		t.Fatalf("pushes due at %v, want one at %s", dues, clockT0.Add(30*time.Minute))
	}
	if want := clockT0.Add(30 * time.Minute).Unix(); stamps[0] != want {
		t.Errorf("webhook-timestamp %d, want the clock's %d", stamps[0], want)
	}
	got, err := cl.Get(t.Context(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Delivered || got.FinishedAt == nil || !got.FinishedAt.Equal(clockT0.Add(30*time.Minute)) {
		t.Fatalf("task %s finished at %v, want delivered at minute 30", got.State, got.FinishedAt)
	}
}

func TestTestClockRetriesUntilDeadInOneAdvance(t *testing.T) {
	_, cl := startClockChild(t)
	h := newClockHooks(t, http.StatusInternalServerError)
	tk, _, err := cl.Schedule(t.Context(), client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Minute),
		Target: task.Target{HTTP: &task.HTTPTarget{URL: h.URL}},
		Retry:  &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(time.Minute), MaxBackoff: task.Duration(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if s := advance(t, cl, 5*time.Minute); s.Fired != 3 {
		t.Errorf("advance 5m: %+v, want three attempts fired", s)
	}
	got, err := cl.Get(t.Context(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Dead {
		t.Fatalf("state %s, want dead", got.State)
	}
	var attempts []time.Time
	for _, e := range got.History {
		if e.What == "attempt" {
			attempts = append(attempts, e.At)
		}
	}
	T := clockT0.Add(time.Minute)
	want := []time.Time{T, T.Add(time.Minute), T.Add(2 * time.Minute)}
	if !slices.EqualFunc(attempts, want, time.Time.Equal) {
		t.Fatalf("attempts at %v, want %v", attempts, want)
	}
	if dues, _ := h.got(); len(dues) != 3 {
		t.Fatalf("receiver saw %d pushes, want 3", len(dues))
	}
}

func TestTestClockCronOverDST(t *testing.T) {
	start := time.Date(2027, 3, 25, 0, 0, 0, 0, time.UTC) // a Thursday; Berlin moves to CEST on Sunday 28
	dir := t.TempDir()
	c := startChild(t, filepath.Join(dir, "data"), "--test-clock="+start.Format(time.RFC3339))
	cl := c.client()
	h := newClockHooks(t, http.StatusOK)
	if _, _, err := cl.CreateSchedule(t.Context(), client.CreateScheduleRequest{App: "shop", Key: "standup",
		Cron: "0 9 * * MON-FRI", Timezone: "Europe/Berlin", Target: task.Target{HTTP: &task.HTTPTarget{URL: h.URL}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := cl.AdvanceClockTo(ctx, time.Date(2027, 4, 3, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	var want []time.Time
	for _, d := range []int{25, 26, 29, 30, 31, 32, 33} { // March 32 is April 1
		want = append(want, time.Date(2027, 3, d, 9, 0, 0, 0, berlin))
	}
	dues, _ := h.got()
	if !slices.EqualFunc(dues, want, time.Time.Equal) {
		t.Fatalf("occurrences pushed at %v\nwant 09:00 Berlin each weekday, once: %v", dues, want)
	}
	if s.Fired != len(want) {
		t.Errorf("fired %d, want %d", s.Fired, len(want))
	}
}

func TestTestClockLeaseRunsOutByTheClock(t *testing.T) {
	_, cl := startClockChild(t)
	tk, _, err := cl.Schedule(t.Context(), client.ScheduleRequest{App: "shop", Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	advance(t, cl, 0)
	claim := func() []*task.Task {
		got, err := cl.Claim(t.Context(), "shop", client.ClaimRequest{Max: 10, Lease: task.Duration(30 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := claim(); len(got) != 1 || got[0].ID != tk.ID {
		t.Fatalf("first claim got %d tasks, want the task", len(got))
	}
	advance(t, cl, 29*time.Second)
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed again 29s into a 30s lease: %d tasks", len(got))
	}
	advance(t, cl, 2*time.Second)
	if got := claim(); len(got) != 1 || got[0].ID != tk.ID {
		t.Fatalf("after advance 31s the lease has run out, but the claim got %d tasks", len(got))
	}
}

func TestTestClockDeadlineAndRetention(t *testing.T) {
	_, cl := startClockChild(t, "--retention", "1h")
	deadline := clockT0.Add(10 * time.Minute)
	// A pull task nobody claims: due at once, expired at its deadline.
	late, _, err := cl.Schedule(t.Context(), client.ScheduleRequest{App: "shop", Deadline: &deadline,
		Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	advance(t, cl, 10*time.Minute) // at its deadline it may still be claimed
	if got, err := cl.Get(t.Context(), late.ID); err != nil || got.State.Final() {
		t.Fatalf("at its deadline: %v %v, want it live", got, err)
	}
	advance(t, cl, time.Millisecond)
	got, err := cl.Get(t.Context(), late.ID)
	if err != nil || got.State != task.Expired || !got.FinishedAt.Equal(deadline.Add(time.Millisecond)) {
		t.Fatalf("past its deadline: %+v %v, want expired 1ms after %s", got, err, deadline)
	}
	// Retention: kept for 1h after it finished, gone after.
	advance(t, cl, time.Hour-time.Millisecond)
	if _, err := cl.Get(t.Context(), late.ID); err != nil {
		t.Fatalf("within retention: %v", err)
	}
	advance(t, cl, 2*time.Millisecond)
	var ce *client.Error
	if _, err := cl.Get(t.Context(), late.ID); !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("past retention: err %v, want 404", err)
	}
}

func TestTestClockRefusals(t *testing.T) {
	_, cl := startClockChild(t)
	if _, err := cl.AdvanceClockTo(t.Context(), clockT0.Add(-time.Second)); err != nil {
		wantFieldError(t, "to before now", err, "to")
	} else {
		t.Error("the clock went back")
	}
	if _, err := cl.AdvanceClock(t.Context(), -time.Second); err != nil {
		wantFieldError(t, "negative advance", err, "advance")
	} else {
		t.Error("the clock went back")
	}

	out, err := runChild(t, "serve", "--data", t.TempDir(), "--test-clock", "--sql", "postgres://127.0.0.1:1/none", "--redis", "127.0.0.1:1")
	if err == nil || !strings.Contains(out, "--test-clock runs on the embedded store only") {
		t.Errorf("cluster mode: %v\n%s\nwant a refusal", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "toc.yaml")
	writeConfig(t, cfg, "apps:\n  shop:\n    tokens: ["+tokenDigest("shop-tok")+"]\n")
	out, err = runChild(t, "serve", "--data", t.TempDir(), "--config", cfg, "--test-clock")
	if err == nil || !strings.Contains(out, "needs an admin token") {
		t.Errorf("tokens without an admin token: %v\n%s\nwant a refusal", err, out)
	}
}

func TestWallClockRoutes(t *testing.T) {
	c := startChild(t, t.TempDir())
	cl := c.client()
	before := time.Now()
	s, err := cl.Clock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.TestClock || s.Now.Before(before.Add(-time.Minute)) || s.Now.After(time.Now().Add(time.Minute)) {
		t.Fatalf("GET clock on a normal server: %+v, want the wall clock", s)
	}
	_, err = cl.AdvanceClock(t.Context(), time.Minute)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || !strings.Contains(ce.Message, "wall clock") {
		t.Fatalf("POST clock on a normal server: %v, want 409 explaining the wall clock", err)
	}
}
