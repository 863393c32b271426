package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// heldCreates is a store whose Create calls wait until released, so that a
// test can make requests gather behind the writes in flight.
type heldCreates struct {
	store.Store
	calls   atomic.Int32
	entered chan int // the size of each Create call, as it starts
	release chan struct{}
}

func (h *heldCreates) Create(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error) {
	h.calls.Add(1)
	h.entered <- len(ts)
	<-h.release
	return h.Store.Create(ctx, ts)
}

// TestCreatesGather: while the create writes in flight run, the requests
// that come meanwhile wait and go to the store together, in one write; every
// request gets its own results, and a key created twice among them is one
// task.
func TestCreatesGather(t *testing.T) {
	var held *heldCreates
	b := setup(t, func(c *Config) {
		held = &heldCreates{Store: c.Store, entered: make(chan int, 100), release: make(chan struct{})}
		c.Store = held
	})
	type answer struct {
		rs  []CreateResult
		err error
	}
	answers := make([]answer, 12)
	var wg sync.WaitGroup
	req := func(i int, ps ...CreateParams) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := b.eng.Create(context.Background(), ps)
			answers[i] = answer{rs, err}
		}()
	}
	p := func(key string) CreateParams {
		return CreateParams{App: "app", Key: key, DueAt: time.Now().Add(time.Hour), Target: httpTarget}
	}
	// Two requests of createSplitMin tasks take the two write slots and
	// block in the store.
	many := func(prefix string) []CreateParams {
		ps := make([]CreateParams, createSplitMin)
		for j := range ps {
			ps[j] = p(fmt.Sprintf("%s-%d", prefix, j))
		}
		return ps
	}
	req(0, many("a0")...)
	<-held.entered
	req(1, many("a1")...)
	if n := <-held.entered; n != createSplitMin {
		t.Fatalf("the second write carries %d tasks, want its request's %d", n, createSplitMin)
	}
	// Ten more queue while those run: three tasks each, one key shared.
	for i := 2; i < 12; i++ {
		req(i, p(fmt.Sprintf("k%d-1", i)), p(fmt.Sprintf("k%d-2", i)), p("shared"))
	}
	testkit.WaitFor(t, 10*time.Second, "ten requests queued behind the writes", func() bool {
		b.eng.creates.mu.Lock()
		defer b.eng.creates.mu.Unlock()
		return len(b.eng.creates.mu.pending) == 10
	})
	close(held.release) // everything from here on passes straight through
	if n := <-held.entered; n != 30 {
		t.Errorf("the gathered write carries %d tasks, want all 30 queued", n)
	}
	wg.Wait()
	if n := held.calls.Load(); n != 3 {
		t.Errorf("%d store writes for 12 requests, want 3 (two, then one gathered)", n)
	}
	var sharedID task.ID
	created := 0
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("request %d: %v", i, a.err)
		}
		for j, r := range a.rs {
			if r.Err != nil || r.Task == nil {
				t.Fatalf("request %d, task %d: %+v", i, j, r)
			}
			want := fmt.Sprintf("a%d-%d", i, j)
			if i >= 2 {
				want = []string{fmt.Sprintf("k%d-1", i), fmt.Sprintf("k%d-2", i), "shared"}[j]
			}
			if r.Task.Key != want {
				t.Fatalf("request %d, task %d: key %q, want %q", i, j, r.Task.Key, want)
			}
			if r.Task.Key == "shared" {
				if r.Created {
					created++
				}
				if !sharedID.IsZero() && r.Task.ID != sharedID {
					t.Errorf("key shared: tasks %s and %s", sharedID, r.Task.ID)
				}
				sharedID = r.Task.ID
			} else if !r.Created {
				t.Errorf("request %d: task %s not created", i, r.Task.Key)
			}
		}
	}
	if created != 1 {
		t.Errorf("key shared created %d times, want once", created)
	}
}

// oneWriter is heldCreates for a store that asks for one Create at a
// time (store.CreateWriters), as pebblestore does.
type oneWriter struct{ *heldCreates }

func (oneWriter) CreateWriters() int { return 1 }

// TestCreatesOneWriter: with a store that asks for one create write at a
// time, the requests that come while it runs wait, none starts a write of
// its own, and the next write takes them all.
func TestCreatesOneWriter(t *testing.T) {
	var held *heldCreates
	b := setup(t, func(c *Config) {
		held = &heldCreates{Store: c.Store, entered: make(chan int, 100), release: make(chan struct{})}
		c.Store = oneWriter{held}
	})
	p := func(key string) CreateParams {
		return CreateParams{App: "app", Key: key, DueAt: time.Now().Add(time.Hour), Target: httpTarget}
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	req := func(i int) {
		wg.Go(func() { _, errs[i] = b.eng.Create(context.Background(), []CreateParams{p(fmt.Sprintf("k%d", i))}) })
	}
	req(0)
	if n := <-held.entered; n != 1 {
		t.Fatalf("the first write carries %d tasks, want 1", n)
	}
	for i := 1; i < 6; i++ {
		req(i)
	}
	testkit.WaitFor(t, 10*time.Second, "five requests queued behind the first write", func() bool {
		b.eng.creates.mu.Lock()
		defer b.eng.creates.mu.Unlock()
		return len(b.eng.creates.mu.pending) == 5
	})
	if n := held.calls.Load(); n != 1 {
		t.Fatalf("%d store writes started while the first ran, want 1", n)
	}
	close(held.release)
	if n := <-held.entered; n != 5 {
		t.Errorf("the next write carries %d tasks, want the 5 that waited", n)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if n := held.calls.Load(); n != 2 {
		t.Errorf("%d store writes for 6 requests, want 2", n)
	}
}

// TestCreatesUnderLoad: many concurrent requests, each of its own key, all
// get their own task, with fewer store writes than requests, and no slot
// is left taken.
func TestCreatesUnderLoad(t *testing.T) {
	b := setup(t, nil)
	const n = 200
	var wg sync.WaitGroup
	ids := make([]task.ID, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("load-", i)
			rs, err := b.eng.Create(context.Background(), []CreateParams{{App: "app", Key: key, DueAt: time.Now().Add(time.Hour), Target: httpTarget}})
			if err != nil || rs[0].Err != nil || rs[0].Task.Key != key || !rs[0].Created {
				t.Errorf("request %d: %+v %v", i, rs, err)
				return
			}
			ids[i] = rs[0].Task.ID
		}()
	}
	wg.Wait()
	seen := map[task.ID]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("task %s answered twice", id)
		}
		seen[id] = true
	}
	b.eng.creates.mu.Lock()
	defer b.eng.creates.mu.Unlock()
	if b.eng.creates.mu.writers != 0 || len(b.eng.creates.mu.pending) != 0 {
		t.Errorf("after the load: %d writers, %d pending", b.eng.creates.mu.writers, len(b.eng.creates.mu.pending))
	}
}

// TestCreatesBatcherAlone runs the creates batcher over a fake write, no
// engine: with one writer, the requests that come while a write is in
// flight go out together in the next one, and each gets its own results.
func TestCreatesBatcherAlone(t *testing.T) {
	entered := make(chan int, 10)
	release := make(chan struct{})
	c := &creates{maxWriters: 1, write: func(_ context.Context, ts []*task.Task) ([]store.CreateResult, error) {
		entered <- len(ts)
		<-release
		rs := make([]store.CreateResult, len(ts))
		for i, tk := range ts {
			rs[i] = store.CreateResult{Task: tk, Created: true}
		}
		return rs, nil
	}}
	mk := func(key string) []*task.Task { return []*task.Task{{App: "a", Key: key}} }
	var wg sync.WaitGroup
	got := make([][]store.CreateResult, 4)
	req := func(i int) {
		wg.Go(func() {
			rs, err := c.create(t.Context(), mk(fmt.Sprint(i)))
			if err != nil {
				t.Errorf("create %d: %v", i, err)
			}
			got[i] = rs
		})
	}
	req(0)
	if n := <-entered; n != 1 {
		t.Fatalf("first write carries %d tasks, want 1", n)
	}
	for i := 1; i < 4; i++ {
		req(i)
	}
	testkit.WaitFor(t, 5*time.Second, "three requests queued", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.mu.pending) == 3
	})
	release <- struct{}{}
	if n := <-entered; n != 3 {
		t.Errorf("second write carries %d tasks, want the 3 that queued", n)
	}
	close(release)
	wg.Wait()
	for i, rs := range got {
		if len(rs) != 1 || rs[0].Task.Key != fmt.Sprint(i) {
			t.Errorf("request %d got %+v, want its own task", i, rs)
		}
	}
}

// echoWrite is a create write that stores nothing and answers each task
// as created.
func echoWrite(_ context.Context, ts []*task.Task) ([]store.CreateResult, error) {
	rs := make([]store.CreateResult, len(ts))
	for i, tk := range ts {
		rs[i] = store.CreateResult{Task: tk, Created: true}
	}
	return rs, nil
}

// TestCreatesBatcherManyRounds: requests of one task and of many (a
// write takes at most createGatherMax tasks, so some are taken while
// others stay pending), from many goroutines over many writes: each gets
// its own tasks back, whatever array its place in the queue was in (the
// queue reuses a written batch's).
func TestCreatesBatcherManyRounds(t *testing.T) {
	c := &creates{maxWriters: 1, write: func(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error) {
		// A write takes a while, as a store's does: requests queue
		// behind it (pacing only: no outcome depends on it).
		time.Sleep(50 * time.Microsecond)
		return echoWrite(ctx, ts)
	}}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 100 {
				n := 1
				if i%4 == g%4 {
					// A quarter full batches: the queue often holds
					// more than a write takes.
					n = MaxBatch
				}
				ts := make([]*task.Task, n)
				for j := range ts {
					ts[j] = &task.Task{App: "a"}
				}
				rs, err := c.create(t.Context(), ts)
				if err != nil || len(rs) != n {
					t.Errorf("request %d-%d: %d results, %v", g, i, len(rs), err)
					return
				}
				for j, r := range rs {
					if r.Task != ts[j] {
						t.Errorf("request %d-%d: result %d is another request's task", g, i, j)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.writers != 0 || len(c.mu.pending) != 0 {
		t.Errorf("after the load: %d writers, %d pending", c.mu.writers, len(c.mu.pending))
	}
}

// BenchmarkCreatesBatcher is the batcher's own cost per request (one
// task each, from 16 goroutines on 2 CPUs as the bench's clients), over a
// write that does nothing.
//
//	go test -run '^$' -bench CreatesBatcher -benchmem ./internal/engine/
func BenchmarkCreatesBatcher(b *testing.B) {
	c := &creates{maxWriters: 1, write: echoWrite}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		ts := []*task.Task{{App: "a"}}
		for pb.Next() {
			if _, err := c.create(context.Background(), ts); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestCreatesQueueReuse: the queue grows into a written batch's array,
// never into one a write still holds. A write that could not take all
// that was pending (createGatherMax) leaves the rest in the same array;
// once the first is written and the rest taken, new requests must not
// land in the rest's places.
func TestCreatesQueueReuse(t *testing.T) {
	c := &creates{maxWriters: 1}
	full := make([]*task.Task, createGatherMax/2)
	reqs := make([]*createReq, 4)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range reqs {
		reqs[i] = &createReq{tasks: full}
		c.mu.pending = append(c.mu.pending, reqs[i])
	}
	first := c.takeLocked() // two of the four: a full write
	if len(first) != 2 {
		t.Fatalf("first write takes %d requests, want 2", len(first))
	}
	c.doneLocked(first)
	second := c.takeLocked() // the other two, still in flight below
	if len(second) != 2 || second[0] != reqs[2] || second[1] != reqs[3] {
		t.Fatalf("second write takes %v, want requests 2 and 3", second)
	}
	for range 8 {
		c.mu.pending = append(c.mu.pending, &createReq{wake: make(chan struct{}, 1)})
	}
	if second[0] != reqs[2] || second[1] != reqs[3] {
		t.Errorf("queueing new requests changed the write in flight: %v", second)
	}
}

// syncCounter is a cluster index that records the size of each Sync.
type syncCounter struct {
	fakeIndex
	mu    sync.Mutex
	syncs []int
}

func (x *syncCounter) Sync(_ context.Context, ts ...*task.Task) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncs = append(x.syncs, len(ts))
	return nil
}

// TestCreatesGatherMirrorOnce: in a cluster, the tasks of the requests one
// create write gathered are mirrored to the index in one Sync by that
// write, not one Sync per request (each a Redis round trip).
func TestCreatesGatherMirrorOnce(t *testing.T) {
	var held *heldCreates
	x := &syncCounter{}
	b := setup(t, func(c *Config) {
		held = &heldCreates{Store: c.Store, entered: make(chan int, 100), release: make(chan struct{})}
		x.fakeIndex = fakeIndex{st: c.Store, held: map[task.ID]time.Time{}}
		c.Store, c.Index = held, x
	})
	var wg sync.WaitGroup
	req := func(ps ...CreateParams) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.eng.Create(context.Background(), ps); err != nil {
				t.Error(err)
			}
		}()
	}
	p := func(key string) CreateParams {
		return CreateParams{App: "app", Key: key, DueAt: time.Now().Add(time.Hour), Target: httpTarget}
	}
	for i := range createWriters { // each big enough for a write of its own
		ps := make([]CreateParams, createSplitMin)
		for j := range ps {
			ps[j] = p(fmt.Sprintf("a%d-%d", i, j))
		}
		req(ps...)
		<-held.entered
	}
	for i := range 10 {
		req(p(fmt.Sprintf("k%d-1", i)), p(fmt.Sprintf("k%d-2", i)))
	}
	testkit.WaitFor(t, 10*time.Second, "ten requests queued behind the writes", func() bool {
		b.eng.creates.mu.Lock()
		defer b.eng.creates.mu.Unlock()
		return len(b.eng.creates.mu.pending) == 10
	})
	close(held.release)
	if n := <-held.entered; n != 20 {
		t.Fatalf("the gathered write carries %d tasks, want all 20 queued", n)
	}
	wg.Wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	got := append([]int(nil), x.syncs...)
	slices.Sort(got)
	if want := []int{20, createSplitMin, createSplitMin}; !slices.Equal(got, want) {
		t.Errorf("Sync sizes %v, want %v: one per store write", got, want)
	}
}

// TestCreatesSplitWhenMany: while a create write is in flight, requests
// of few tasks wait for it and go in the next write together; a second
// write opens only once createSplitMin tasks wait.
func TestCreatesSplitWhenMany(t *testing.T) {
	var held *heldCreates
	b := setup(t, func(c *Config) {
		held = &heldCreates{Store: c.Store, entered: make(chan int, 100), release: make(chan struct{})}
		c.Store = held
	})
	p := func(key string) CreateParams {
		return CreateParams{App: "app", Key: key, DueAt: time.Now().Add(time.Hour), Target: httpTarget}
	}
	var wg sync.WaitGroup
	req := func(ps ...CreateParams) {
		wg.Go(func() {
			if _, err := b.eng.Create(context.Background(), ps); err != nil {
				t.Error(err)
			}
		})
	}
	req(p("first"))
	if n := <-held.entered; n != 1 {
		t.Fatalf("the first write carries %d tasks, want 1", n)
	}
	const few = 5
	for i := range few {
		req(p(fmt.Sprintf("few-%d", i)))
	}
	testkit.WaitFor(t, 10*time.Second, "the few requests queued behind the first write", func() bool {
		b.eng.creates.mu.Lock()
		defer b.eng.creates.mu.Unlock()
		return len(b.eng.creates.mu.pending) == few
	})
	if n := held.calls.Load(); n != 1 {
		t.Fatalf("%d store writes started for %d waiting tasks, want 1 (no second write under %d)", n, few, createSplitMin)
	}
	ps := make([]CreateParams, createSplitMin-few)
	for j := range ps {
		ps[j] = p(fmt.Sprintf("many-%d", j))
	}
	req(ps...) // createSplitMin waiting now: a second write takes them all
	if n := <-held.entered; n != createSplitMin {
		t.Errorf("the second write carries %d tasks, want the %d waiting", n, createSplitMin)
	}
	close(held.release)
	wg.Wait()
	if n := held.calls.Load(); n != 2 {
		t.Errorf("%d store writes, want 2", n)
	}
}

// TestCreatesWroteOverlapsNextWrite: a write's slot goes to the next
// request once its tasks are stored, before they are handed to wrote (a
// cluster's mirror, a Redis round trip): the next write starts while that
// runs, and each request is answered only after its own tasks were handed
// on.
func TestCreatesWroteOverlapsNextWrite(t *testing.T) {
	entered := make(chan int, 10)
	inWrote := make(chan struct{}, 10)
	releaseWrote := make(chan struct{})
	var mirrored sync.Map // key → true once handed to wrote
	c := &creates{maxWriters: 1,
		write: func(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error) {
			entered <- len(ts)
			return echoWrite(ctx, ts)
		},
		wrote: func(_ context.Context, ws ...written) {
			inWrote <- struct{}{}
			<-releaseWrote
			for _, w := range ws {
				mirrored.Store(w.t.Key, true)
			}
		},
	}
	var wg sync.WaitGroup
	req := func(key string) {
		wg.Go(func() {
			rs, err := c.create(t.Context(), []*task.Task{{App: "a", Key: key}})
			if err != nil || len(rs) != 1 {
				t.Errorf("create %s: %v %v", key, rs, err)
				return
			}
			if _, ok := mirrored.Load(key); !ok {
				t.Errorf("create %s answered before its task was handed to wrote", key)
			}
		})
	}
	req("first")
	<-entered
	<-inWrote // the first write's wrote runs, held
	req("second")
	select {
	case <-entered: // the second write started meanwhile
	case <-time.After(5 * time.Second):
		t.Fatal("the second write waited for the first's wrote")
	}
	close(releaseWrote)
	wg.Wait()
}
