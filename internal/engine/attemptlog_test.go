package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// logStore is a store with an attempt log in memory, kept across the
// engines a test opens over it one after another (as pebblestore keeps its
// log across processes).
type logStore struct {
	store.Store
	mu       sync.Mutex
	log      []noted // nil: not started
	restarts int
}

type noted struct {
	id task.ID
	n  int
}

var _ store.AttemptLog = (*logStore)(nil)

func (s *logStore) NoteAttempts(_ context.Context, ids []task.ID, ns []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return errors.New("not started")
	}
	for i, id := range ids {
		s.log = append(s.log, noted{id, ns[i]})
	}
	return nil
}

func (s *logStore) NotedAttempts(context.Context) (map[task.ID]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[task.ID]int{}
	for _, r := range s.log {
		m[r.id] = max(m[r.id], r.n)
	}
	return m, nil
}

func (s *logStore) RestartAttemptLog(_ context.Context, under func() ([]task.ID, []int)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, ns := under()
	s.log = []noted{}
	for i, id := range ids {
		s.log = append(s.log, noted{id, ns[i]})
	}
	s.restarts++
	return nil
}

func (s *logStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// TestAttemptsCountedAcrossStops: a push attempt under way when its
// process stops (here Stop cuts it short; a SIGKILL leaves the same store
// behind, see internal/e2e's TestCrashDuringAttempts) counts as made: the
// next process delivers attempt 2, not attempt 1 again, and a task whose
// every attempt is cut short ends dead at max_attempts instead of being
// retried forever (issue 22).
func TestAttemptsCountedAcrossStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &logStore{Store: memstore.New()}
		open := func() (*bundle, *blockingSink) {
			snk := newBlockingSink()
			b := setup(t, func(c *Config) {
				c.Store = st
				c.Sinks = map[string]sink.Sink{"http": snk}
			})
			return b, snk
		}
		stopNow := func(b *bundle) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()            // no time for the attempt under way: it is cut short
			_ = b.eng.Stop(ctx) // says so
		}
		b, snk := open()
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second), Retry: task.RetryPolicy{MaxAttempts: 2}})
		if got := (<-snk.started).Attempts; got != 1 {
			t.Fatalf("first attempt numbered %d, want 1", got)
		}
		stopNow(b)

		b, snk = open()
		if got := (<-snk.started).Attempts; got != 2 {
			t.Fatalf("after a stop during attempt 1, the next is numbered %d, want 2", got)
		}
		stopNow(b)

		b, snk = open()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(snk.started); n != 0 {
			t.Errorf("%d attempts after max_attempts (2) were all cut short, want none", n)
		}
		got := b.get(t, tk.ID)
		if got.State != task.Dead || got.Attempts != 2 || got.LastError != interruptedMsg {
			t.Errorf("after two attempts cut short: %s, %d attempts, error %q; want dead after 2, %q", got.State, got.Attempts, got.LastError, interruptedMsg)
		}
		if n := st.len(); n != 0 {
			t.Errorf("%d attempts left in the log, want none (it starts over at start)", n)
		}
	})
}

// TestAttemptLogStartsOver: every attemptLogMax notes the log starts over
// with the attempts under way, which keep counting: one cut short by a
// stop after that is delivered next as attempt 2.
func TestAttemptLogStartsOver(t *testing.T) {
	defer func(m int64) { attemptLogMax = m }(attemptLogMax)
	attemptLogMax = 2
	synctest.Test(t, func(t *testing.T) {
		st := &logStore{Store: memstore.New()}
		var delivered atomic.Int64
		started := make(chan *task.Task, 1)
		// The first task's attempt is held until Stop; the others succeed.
		snk := sink.Func(func(ctx context.Context, tk *task.Task) error {
			if tk.Key == "held" {
				started <- tk
				<-ctx.Done()
				return ctx.Err()
			}
			delivered.Add(1)
			return nil
		})
		b := setup(t, func(c *Config) {
			c.Store = st
			c.Sinks = map[string]sink.Sink{"http": snk}
		})
		held := b.schedule(t, CreateParams{Key: "held", DueAt: time.Now().Add(time.Second)})
		<-started
		for i := range 3 {
			b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
			time.Sleep(2 * time.Second)
			if n := delivered.Load(); n != int64(i+1) {
				t.Fatalf("%d delivered, want %d", n, i+1)
			}
		}
		if st.restarts != 2 {
			t.Errorf("log started %d times, want 2 (at start, and after 2 attempts noted)", st.restarts)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = b.eng.Stop(ctx) // says the held attempt was cut short
		b = setup(t, func(c *Config) {
			c.Store = st
			c.Sinks = map[string]sink.Sink{"http": snk}
		})
		got := <-started
		if got.ID != held.ID || got.Attempts != 2 {
			t.Errorf("after the stop: attempt %d delivered, want 2", got.Attempts)
		}
		if n := delivered.Load(); n != 3 {
			t.Errorf("%d delivered, want 3 (none again)", n)
		}
		_ = b.eng.Stop(ctx)
	})
}
