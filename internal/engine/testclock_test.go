package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/task"
)

// clockSink records the engine's clock at each delivery.
type clockSink struct {
	mu   sync.Mutex
	at   []time.Time
	now  func() time.Time
	fail bool
}

func (s *clockSink) Deliver(ctx context.Context, t *task.Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, s.now())
	if s.fail {
		return errors.New("500 Internal Server Error")
	}
	return nil
}

func (s *clockSink) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

var clockStart = time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC)

func setupTestClock(t *testing.T, fail bool) (*bundle, *clockSink, *clock.Test) {
	tc := clock.NewTest(clockStart)
	cs := &clockSink{now: tc.Now, fail: fail}
	b := setup(t, func(c *Config) {
		c.Clock = tc
		c.Sinks = map[string]sink.Sink{"http": cs}
	})
	return b, cs, tc
}

func TestAdvanceClockFiresAtDueTimeNotBefore(t *testing.T) {
	b, cs, _ := setupTestClock(t, false)
	tk := b.schedule(t, CreateParams{DueAt: clockStart.Add(30 * time.Minute)})
	if !tk.CreatedAt.Equal(clockStart) {
		t.Errorf("created_at = %s, want the clock's %s", tk.CreatedAt, clockStart)
	}
	now, fired, err := b.eng.AdvanceClock(t.Context(), clockStart.Add(30*time.Minute-time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if fired != 0 || len(cs.times()) != 0 || !now.Equal(clockStart.Add(30*time.Minute-time.Millisecond)) {
		t.Fatalf("advance 29m59.999s: now %s, fired %d, deliveries %v; want nothing fired", now, fired, cs.times())
	}
	now, fired, err = b.eng.AdvanceClock(t.Context(), now.Add(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if fired != 1 {
		t.Fatalf("advance to 30m: fired %d, want 1", fired)
	}
	if got := cs.times(); len(got) != 1 || !got[0].Equal(clockStart.Add(30*time.Minute)) {
		t.Fatalf("deliveries at %v, want one at %s", got, clockStart.Add(30*time.Minute))
	}
	got := b.get(t, tk.ID)
	if got.State != task.Delivered || got.FinishedAt == nil || !got.FinishedAt.Equal(now) {
		t.Fatalf("task %s finished at %v, want delivered at %s", got.State, got.FinishedAt, now)
	}
}

func TestAdvanceClockRetriesWithinOneAdvance(t *testing.T) {
	b, cs, _ := setupTestClock(t, true)
	due := clockStart.Add(time.Minute)
	tk := b.schedule(t, CreateParams{DueAt: due, Retry: task.RetryPolicy{
		MaxAttempts: 3, MinBackoff: task.Duration(time.Minute), MaxBackoff: task.Duration(time.Minute)}})
	_, fired, err := b.eng.AdvanceClock(t.Context(), clockStart.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{due, due.Add(time.Minute), due.Add(2 * time.Minute)}
	got := cs.times()
	if fired != 3 || len(got) != 3 {
		t.Fatalf("fired %d, deliveries %v; want 3 at %v", fired, got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("attempt %d at %s, want %s", i+1, got[i], want[i])
		}
	}
	if st := b.get(t, tk.ID).State; st != task.Dead {
		t.Errorf("state %s, want dead", st)
	}
}

func TestAdvanceClockRefusals(t *testing.T) {
	b, _, _ := setupTestClock(t, false)
	if _, _, err := b.eng.AdvanceClock(t.Context(), clockStart.Add(-time.Second)); !errors.As(err, new(*ClockBackError)) {
		t.Errorf("back: err = %v, want a *ClockBackError", err)
	}
	wall := setup(t, nil)
	if wall.eng.TestClock() {
		t.Error("an engine without a Clock says it runs on a test clock")
	}
	if _, _, err := wall.eng.AdvanceClock(t.Context(), time.Now().Add(time.Hour)); !errors.Is(err, ErrWallClock) {
		t.Errorf("wall clock: err = %v, want ErrWallClock", err)
	}
}
