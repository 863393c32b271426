package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// bulkStore counts the engine's List calls and records the sizes of its
// UpdateMany batches; afterWrite, when set, runs after each UpdateMany of
// more than fireBatchMax tasks (only a bulk action writes so many).
type bulkStore struct {
	store.Store
	mu         sync.Mutex
	lists      int
	batches    []int
	afterWrite func()
}

func (s *bulkStore) List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.List(ctx, app, state, after, limit)
}

func (s *bulkStore) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	ts, errs := s.Store.UpdateMany(ctx, ids, o, fn)
	s.mu.Lock()
	s.batches = append(s.batches, len(ids))
	after := s.afterWrite
	s.mu.Unlock()
	if after != nil && len(ids) > fireBatchMax {
		after()
	}
	return ts, errs
}

// reset forgets what was counted and returns it: List calls, and the
// batches larger than the fire path's (the bulk writes).
func (s *bulkStore) reset() (lists int, bulk []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.batches {
		if n > fireBatchMax {
			bulk = append(bulk, n)
		}
	}
	lists = s.lists
	s.lists, s.batches = 0, nil
	return lists, bulk
}

// bulkSetup is setup with a bulkStore and a sink that fails until
// *failing is set false (after a synctest.Wait).
func bulkSetup(t *testing.T) (*bundle, *bulkStore, *bool) {
	var bs *bulkStore
	b := setup(t, func(c *Config) {
		bs = &bulkStore{Store: c.Store}
		c.Store = bs
	})
	failing := true
	b.sink.fail = func(*task.Task) error {
		if failing {
			return errors.New("503 from receiver")
		}
		return nil
	}
	return b, bs, &failing
}

// deadTasks makes n dead tasks of app (one attempt each, which fails) and
// returns their ids in id order.
func deadTasks(t *testing.T, b *bundle, app string, n int) []task.ID {
	t.Helper()
	var ids []task.ID
	for n > 0 {
		k := min(n, MaxBatch)
		ps := make([]CreateParams, k)
		for i := range ps {
			ps[i] = CreateParams{App: app, Target: httpTarget, DueAt: time.Now(), Retry: task.RetryPolicy{MaxAttempts: 1}}
		}
		rs, err := b.eng.Create(t.Context(), ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			ids = append(ids, r.Task.ID)
		}
		n -= k
	}
	time.Sleep(time.Second)
	synctest.Wait()
	for _, id := range ids {
		if s := b.get(t, id).State; s != task.Dead {
			t.Fatalf("task %s is %s, want dead", id, s)
		}
	}
	slices.SortFunc(ids, func(a, b task.ID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}

// countState counts the tasks of ids in state s.
func countState(t *testing.T, b *bundle, ids []task.ID, s task.State) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		if b.get(t, id).State == s {
			n++
		}
	}
	return n
}

// TestRetryAllPagesAndIsIdempotent: 1200 dead tasks are retried in pages
// of BulkPage, one write per page; each is delivered, keeps its history,
// and a repeat changes nothing. Another app's dead tasks stay dead.
func TestRetryAllPagesAndIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, bs, failing := bulkSetup(t)
		ids := deadTasks(t, b, "app", 1200)
		others := deadTasks(t, b, "other", 3)
		*failing = false
		bs.reset()

		res, err := b.eng.Bulk().RetryAll(t.Context(), BulkFilter{App: "app", State: task.Dead})
		if err != nil {
			t.Fatal(err)
		}
		if res != (BulkResult{Count: 1200}) {
			t.Errorf("RetryAll = %+v, want 1200 and no more", res)
		}
		lists, bulk := bs.reset()
		if lists != 3 || !slices.Equal(bulk, []int{500, 500, 200}) {
			t.Errorf("%d List calls and bulk writes %v, want 3 and [500 500 200]", lists, bulk)
		}
		synctest.Wait()
		if n := countState(t, b, ids, task.Delivered); n != len(ids) {
			t.Errorf("%d of %d retried tasks delivered", n, len(ids))
		}
		got := b.get(t, ids[0])
		var whats []string
		for _, ev := range got.History {
			whats = append(whats, ev.What)
		}
		if w := strings.Join(whats, " "); w != "created attempt failed dead retried attempt delivered" {
			t.Errorf("history %q", w)
		}
		if got.Attempts != 1 {
			t.Errorf("attempts = %d after a retry and one attempt, want 1", got.Attempts)
		}
		if n := countState(t, b, others, task.Dead); n != len(others) {
			t.Errorf("%d of the other app's %d dead tasks left dead", n, len(others))
		}

		res, err = b.eng.Bulk().RetryAll(t.Context(), BulkFilter{App: "app", State: task.Dead})
		if err != nil || res != (BulkResult{}) {
			t.Errorf("repeat: %+v, %v; want 0", res, err)
		}
	})
}

// TestRetryAllFilters: the key prefix, due_after (inclusive), due_before
// (exclusive) and the state pick the tasks, alone and together.
func TestRetryAllFilters(t *testing.T) {
	tests := []struct {
		name          string
		state         task.State
		prefix        string
		after, before int      // due bounds in hours from the start; 0 for none
		want          []string // keys of the tasks retried
	}{
		{"all dead", task.Dead, "", 0, 0, []string{"a/1", "a/2", "b/1", ""}},
		{"key prefix", task.Dead, "a/", 0, 0, []string{"a/1", "a/2"}},
		{"whole key as prefix", task.Dead, "b/1", 0, 0, []string{"b/1"}},
		{"no match", task.Dead, "zzz", 0, 0, nil},
		{"due after is inclusive", task.Dead, "", -2, 0, []string{"a/2", "b/1", ""}},
		{"due before is exclusive", task.Dead, "", 0, -2, []string{"a/1"}},
		{"a window", task.Dead, "", -3, -1, []string{"a/1", "a/2", ""}},
		{"prefix and window", task.Dead, "a/", -2, 0, []string{"a/2"}},
		{"expired", task.Expired, "", 0, 0, []string{"a/3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _, failing := bulkSetup(t)
				start := time.Now()
				hours := func(h int) time.Time { return start.Add(time.Duration(h) * time.Hour) }
				type fixture struct {
					key   string
					due   int // hours from start
					state task.State
				}
				fixtures := []fixture{
					{"a/1", -3, task.Dead}, {"a/2", -2, task.Dead}, {"b/1", -1, task.Dead}, {"", -2, task.Dead},
					{"a/3", -1, task.Expired}, {"a/4", 1, task.Scheduled},
				}
				var tks []*task.Task
				for _, fx := range fixtures {
					p := CreateParams{Key: fx.key, DueAt: hours(fx.due), Retry: task.RetryPolicy{MaxAttempts: 1}}
					if fx.state == task.Expired {
						p.Deadline = ptr(start.Add(10 * time.Millisecond))
						p.Retry.MaxAttempts = 5
					}
					tks = append(tks, b.schedule(t, p))
				}
				other := b.schedule(t, CreateParams{App: "other", Key: "a/1", DueAt: hours(-3), Retry: task.RetryPolicy{MaxAttempts: 1}})
				time.Sleep(time.Minute)
				synctest.Wait()
				for i, fx := range fixtures {
					if s := b.get(t, tks[i].ID).State; s != fx.state {
						t.Fatalf("fixture %q is %s, want %s", fx.key, s, fx.state)
					}
				}
				*failing = false

				f := BulkFilter{App: "app", State: tt.state, KeyPrefix: tt.prefix}
				if tt.after != 0 {
					f.DueAfter = hours(tt.after)
				}
				if tt.before != 0 {
					f.DueBefore = hours(tt.before)
				}
				res, err := b.eng.Bulk().RetryAll(t.Context(), f)
				if err != nil {
					t.Fatal(err)
				}
				if res.Count != len(tt.want) || res.More {
					t.Errorf("RetryAll = %+v, want %d tasks", res, len(tt.want))
				}
				synctest.Wait()
				for i, fx := range fixtures {
					want := fx.state
					if slices.Contains(tt.want, fx.key) && fx.state != task.Scheduled {
						want = task.Delivered
					}
					if s := b.get(t, tks[i].ID).State; s != want {
						t.Errorf("task %q is %s, want %s", fx.key, s, want)
					}
				}
				if s := b.get(t, other.ID).State; s != task.Dead {
					t.Errorf("the other app's task is %s, want dead", s)
				}
			})
		})
	}
}

// TestCancelAll: scheduled tasks that match are cancelled (and never
// fire), the others fire; a repeat cancels nothing.
func TestCancelAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, failing := bulkSetup(t)
		*failing = false
		start := time.Now()
		var match, keep []task.ID
		for i := range 600 {
			key := fmt.Sprintf("promo/%d", i)
			match = append(match, b.schedule(t, CreateParams{Key: key, DueAt: start.Add(time.Hour)}).ID)
		}
		keep = append(keep,
			b.schedule(t, CreateParams{Key: "order-1", DueAt: start.Add(time.Hour)}).ID,
			b.schedule(t, CreateParams{Key: "promo/late", DueAt: start.Add(3 * time.Hour)}).ID,
			b.schedule(t, CreateParams{App: "other", Key: "promo/x", DueAt: start.Add(time.Hour)}).ID)

		f := BulkFilter{App: "app", State: task.Scheduled, KeyPrefix: "promo/", DueBefore: start.Add(2 * time.Hour)}
		res, err := b.eng.Bulk().CancelAll(t.Context(), f)
		if err != nil || res != (BulkResult{Count: 600}) {
			t.Fatalf("CancelAll = %+v, %v; want 600", res, err)
		}
		if n := countState(t, b, match, task.Cancelled); n != len(match) {
			t.Errorf("%d of %d cancelled", n, len(match))
		}
		if res, err := b.eng.Bulk().CancelAll(t.Context(), f); err != nil || res != (BulkResult{}) {
			t.Errorf("repeat: %+v, %v; want 0", res, err)
		}

		time.Sleep(4 * time.Hour)
		synctest.Wait()
		if n := countState(t, b, keep, task.Delivered); n != len(keep) {
			t.Errorf("%d of the %d tasks the filter left delivered", n, len(keep))
		}
		if n := len(b.sink.deliveries()); n != len(keep) {
			t.Errorf("%d deliveries, want %d: cancelled tasks fired", n, len(keep))
		}
	})
}

// TestBulkLimit: a call stops at its limit and says there is more; repeats
// go on from what is left.
func TestBulkLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, failing := bulkSetup(t)
		ids := deadTasks(t, b, "app", 1200)
		*failing = false
		f := BulkFilter{App: "app", State: task.Dead, Limit: 700}
		for i, want := range []BulkResult{{Count: 700, More: true}, {Count: 500}, {}} {
			res, err := b.eng.Bulk().RetryAll(t.Context(), f)
			if err != nil || res != want {
				t.Errorf("call %d: %+v, %v; want %+v", i+1, res, err, want)
			}
			synctest.Wait()
		}
		if n := countState(t, b, ids, task.Delivered); n != len(ids) {
			t.Errorf("%d of %d delivered", n, len(ids))
		}

		// A limit met at the end of a full page: more, maybe none.
		*failing = true
		deadTasks(t, b, "app2", 1000)
		*failing = false
		f = BulkFilter{App: "app2", State: task.Dead, Limit: 1000}
		for i, want := range []BulkResult{{Count: 1000, More: true}, {}} {
			res, err := b.eng.Bulk().RetryAll(t.Context(), f)
			if err != nil || res != want {
				t.Errorf("app2 call %d: %+v, %v; want %+v", i+1, res, err, want)
			}
		}
	})
}

// TestBulkContextEnds: a context that ends while a page is written stops
// the call after that page; the page's changes stay.
func TestBulkContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, bs, failing := bulkSetup(t)
		ids := deadTasks(t, b, "app", 1200)
		*failing = false
		ctx, cancel := context.WithCancel(t.Context())
		bs.mu.Lock()
		bs.afterWrite = cancel
		bs.mu.Unlock()
		res, err := b.eng.Bulk().RetryAll(ctx, BulkFilter{App: "app", State: task.Dead})
		if !errors.Is(err, context.Canceled) || res != (BulkResult{Count: BulkPage}) {
			t.Fatalf("RetryAll = %+v, %v; want %d and context.Canceled", res, err, BulkPage)
		}
		synctest.Wait()
		if n := countState(t, b, ids[:BulkPage], task.Delivered); n != BulkPage {
			t.Errorf("%d of the first page's %d tasks delivered", n, BulkPage)
		}
		if n := countState(t, b, ids[BulkPage:], task.Dead); n != len(ids)-BulkPage {
			t.Errorf("%d of the other %d tasks still dead", n, len(ids)-BulkPage)
		}
	})
}

// TestBulkValidation: a bad filter is a *task.FieldError naming the
// field; a stopped engine is not ready.
func TestBulkValidation(t *testing.T) {
	b := setup(t, nil)
	now := time.Now()
	tests := []struct {
		name   string
		cancel bool
		f      BulkFilter
		field  string
	}{
		{"no app", false, BulkFilter{State: task.Dead}, "app"},
		{"bad app", false, BulkFilter{App: "Shop", State: task.Dead}, "app"},
		{"no state", false, BulkFilter{App: "a"}, "state"},
		{"retry scheduled", false, BulkFilter{App: "a", State: task.Scheduled}, "state"},
		{"retry unknown state", false, BulkFilter{App: "a", State: "asleep"}, "state"},
		{"cancel dead", true, BulkFilter{App: "a", State: task.Dead}, "state"},
		{"long prefix", false, BulkFilter{App: "a", State: task.Dead, KeyPrefix: strings.Repeat("k", task.MaxKeyLen+1)}, "key_prefix"},
		{"bad UTF-8 prefix", true, BulkFilter{App: "a", State: task.Scheduled, KeyPrefix: "a\xff"}, "key_prefix"},
		{"empty window", false, BulkFilter{App: "a", State: task.Dead, DueAfter: now, DueBefore: now}, "due_before"},
		{"window backwards", true, BulkFilter{App: "a", State: task.Scheduled, DueAfter: now, DueBefore: now.Add(-time.Second)}, "due_before"},
		{"negative limit", false, BulkFilter{App: "a", State: task.Dead, Limit: -1}, "limit"},
		{"limit too large", true, BulkFilter{App: "a", State: task.Scheduled, Limit: MaxBulk + 1}, "limit"},
	}
	for _, tt := range tests {
		op := b.eng.Bulk().RetryAll
		if tt.cancel {
			op = b.eng.Bulk().CancelAll
		}
		_, err := op(t.Context(), tt.f)
		var fe *task.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: %v, want a field error on %q", tt.name, err, tt.field)
		}
	}
	if err := b.eng.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.Bulk().RetryAll(t.Context(), BulkFilter{App: "a", State: task.Dead}); !errors.Is(err, ErrNotReady) {
		t.Errorf("after Stop: %v, want ErrNotReady", err)
	}
}

// TestBulkOverItsWriter runs Bulk on its own, over fakes of what it takes
// from the engine (a listing, updateMany, wrote, underway): no engine, no
// store. A task whose attempt is under way is left, as Cancel leaves it;
// wrote gets exactly the tasks changed; the limit (counted over the
// matches a page selects, the one left included) stops the call with More.
func TestBulkOverItsWriter(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var gen task.IDGenerator
	tasks := map[task.ID]*task.Task{}
	var ids []task.ID
	for range 5 {
		tk := &task.Task{ID: gen.New(now, 0), App: "a", State: task.Scheduled, DueAt: now, Target: httpTarget}
		tasks[tk.ID] = tk
		ids = append(ids, tk.ID)
	}
	busy := ids[1]
	var wrote []task.ID
	b := &Bulk{p: bulkParams{
		ready: func() error { return nil },
		now:   func() time.Time { return now },
		list: func(_ context.Context, app string, st task.State, after task.ID, limit int) ([]*task.Task, error) {
			var page []*task.Task
			from := slices.Index(ids, after) + 1 // ids are in id order; zero: -1
			for _, id := range ids[from:] {
				if tk := tasks[id]; tk.State == st && len(page) < limit {
					page = append(page, tk.Clone())
				}
			}
			return page, nil
		},
		updateMany: func(_ context.Context, ids []task.ID, fn func([]*task.Task) []error) ([]written, []error) {
			ts := make([]*task.Task, len(ids))
			for i, id := range ids {
				ts[i] = tasks[id].Clone()
			}
			errs := fn(ts)
			ws := make([]written, len(ts))
			for i, tk := range ts {
				if errs[i] == nil {
					tasks[tk.ID] = tk
					ws[i] = written{t: tk}
				}
			}
			return ws, errs
		},
		wrote: func(_ context.Context, ws ...written) {
			for _, w := range ws {
				wrote = append(wrote, w.t.ID)
			}
		},
		underway: func(id task.ID) bool { return id == busy },
	}}

	res, err := b.CancelAll(t.Context(), BulkFilter{App: "a", State: task.Scheduled, Limit: 3})
	if err != nil || res.Count != 2 || !res.More {
		t.Fatalf("CancelAll(limit 3) = %+v, %v; want 2 changed and More", res, err)
	}
	if want := []task.ID{ids[0], ids[2]}; !slices.Equal(wrote, want) {
		t.Errorf("wrote %v, want %v (the one under way left)", wrote, want)
	}
	if st := tasks[busy].State; st != task.Scheduled {
		t.Errorf("the task under way is %s, want scheduled", st)
	}
	res, err = b.CancelAll(t.Context(), BulkFilter{App: "a", State: task.Scheduled})
	if err != nil || res.Count != 2 || res.More {
		t.Fatalf("CancelAll again = %+v, %v; want the last two changed, no More", res, err)
	}
	if want := []task.ID{ids[0], ids[2], ids[3], ids[4]}; !slices.Equal(wrote, want) {
		t.Errorf("wrote %v, want %v", wrote, want)
	}
}
