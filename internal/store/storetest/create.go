package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

func testCreateNew(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k1"), withTrace)
	p := b.newTask("app", 2*time.Minute, withPull)
	res, err := b.s.Create(b.ctx, []*task.Task{a, p})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := []store.CreateResult{{Task: a, Created: true}, {Task: p, Created: true}}
	if diff := cmp.Diff(want, res, cmpOpts); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	check(t, b, []*task.Task{a, p})
}

func testCreateDuplicateKey(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k1"))
	b.create(t, a)

	// Same app and key: the existing task comes back, nothing is stored.
	dup := b.newTask("app", 2*time.Minute, withKey("k1"), withPull)
	res, err := b.s.Create(b.ctx, []*task.Task{dup})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := []store.CreateResult{{Task: a, Created: false}}
	if diff := cmp.Diff(want, res, cmpOpts); diff != "" {
		t.Errorf("Create of a duplicate (-want +got):\n%s", diff)
	}
	if _, err := b.s.Get(b.ctx, dup.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(duplicate) error = %v, want ErrNotFound", err)
	}

	// The key belongs to one app; another key of the same app is free.
	other := b.newTask("other", time.Minute, withKey("k1"))
	k2 := b.newTask("app", time.Minute, withKey("k2"))
	b.create(t, other, k2)

	// A finished task keeps its key until it is swept.
	a = b.update(t, a, finished(task.Delivered, b.now))
	dup2 := b.newTask("app", 3*time.Minute, withKey("k1"))
	res, err = b.s.Create(b.ctx, []*task.Task{dup2})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want = []store.CreateResult{{Task: a, Created: false}}
	if diff := cmp.Diff(want, res, cmpOpts); diff != "" {
		t.Errorf("Create with the key of a finished task (-want +got):\n%s", diff)
	}
	check(t, b, []*task.Task{a, other, k2})
}

func testCreateDuplicateKeyInBatch(t *testing.T, b *bundle) {
	x := b.newTask("app", time.Minute, withKey("x"))
	b.create(t, x)

	a := b.newTask("app", time.Minute, withKey("k1"))
	a2 := b.newTask("app", 2*time.Minute, withKey("k1"))
	c := b.newTask("app", time.Minute)
	d := b.newTask("app", time.Minute)
	e := b.newTask("app", 3*time.Minute, withKey("k2"), withPull)
	a3 := b.newTask("app", 4*time.Minute, withKey("k1"))
	e2 := b.newTask("app", 5*time.Minute, withKey("k2"))
	x2 := b.newTask("app", 6*time.Minute, withKey("x"))
	x3 := b.newTask("app", 7*time.Minute, withKey("x"))
	o := b.newTask("other", time.Minute, withKey("k1"))
	res, err := b.s.Create(b.ctx, []*task.Task{a, a2, c, d, e, a3, e2, x2, x3, o})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := []store.CreateResult{
		{Task: a, Created: true},
		{Task: a, Created: false},
		{Task: c, Created: true},
		{Task: d, Created: true},
		{Task: e, Created: true},
		{Task: a, Created: false},
		{Task: e, Created: false},
		{Task: x, Created: false},
		{Task: x, Created: false},
		{Task: o, Created: true},
	}
	if diff := cmp.Diff(want, res, cmpOpts); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	check(t, b, []*task.Task{x, a, c, d, e, o})
}

func testCreateKeyless(t *testing.T, b *bundle) {
	var ts []*task.Task
	for range 3 {
		ts = append(ts, b.newTask("app", time.Minute))
	}
	b.create(t, ts...)
	more := b.newTask("app", time.Minute)
	b.create(t, more)
	check(t, b, append(ts, more))
}

func testCreateMany(t *testing.T, b *bundle) {
	const n = 1000
	apps := []string{"a", "b", "c"}
	var ts []*task.Task
	for i := range n {
		var opts []func(*task.Task)
		if i%2 == 0 {
			opts = append(opts, withKey(fmt.Sprintf("key-%d", i)))
		}
		if i%3 == 0 {
			opts = append(opts, withPull)
		}
		// Due times out of id order, some in the past, many sharing a ms.
		due := time.Duration(i*7919%600-100) * time.Second
		ts = append(ts, b.newTask(apps[i%len(apps)], due, opts...))
	}
	b.create(t, ts...)
	check(t, b, ts)
}

func testCreateEmpty(t *testing.T, b *bundle) {
	res, err := b.s.Create(b.ctx, nil)
	if err != nil || len(res) != 0 {
		t.Errorf("Create(nil) = %v, %v; want no results and no error", res, err)
	}
	check(t, b, nil)
}

func testGetNotFound(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"))
	b.create(t, a)
	missing := b.gen.New(b.now, 0)
	if got, err := b.s.Get(b.ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(missing) = %v, %v; want ErrNotFound", got, err)
	}
	if got, err := b.s.Get(b.ctx, task.ID{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(zero id) = %v, %v; want ErrNotFound", got, err)
	}
}

func testGetByKey(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"))
	o := b.newTask("other", time.Minute, withKey("k"))
	b.create(t, a, o)
	for _, want := range []*task.Task{a, o} {
		got, err := b.s.GetByKey(b.ctx, want.App, "k")
		if err != nil {
			t.Fatalf("GetByKey(%q, k): %v", want.App, err)
		}
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Errorf("GetByKey(%q, k) (-want +got):\n%s", want.App, diff)
		}
	}
	for _, q := range [][2]string{{"app", "K"}, {"app", "k2"}, {"third", "k"}, {"app", ""}} {
		if got, err := b.s.GetByKey(b.ctx, q[0], q[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetByKey(%q, %q) = %v, %v; want ErrNotFound", q[0], q[1], got, err)
		}
	}
}

// testCopies checks that no task a caller hands in or gets back shares
// memory with the store.
func testCopies(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"))
	want := a.Clone()
	scribble := func(t *task.Task) {
		t.Payload[0] = 'X'
		t.Target.HTTP.Headers["X-Trace"] = "changed"
		*t.Deadline = t.Deadline.Add(time.Hour)
		t.Attempts = 99
	}

	res, err := b.s.Create(b.ctx, []*task.Task{a})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	scribble(a)
	scribble(res[0].Task)
	if diff := cmp.Diff(want, b.get(t, want.ID), cmpOpts); diff != "" {
		t.Fatalf("after changing Create's argument and result (-want +got):\n%s", diff)
	}

	scribble(b.get(t, want.ID))
	byKey, err := b.s.GetByKey(b.ctx, "app", "k")
	if err != nil {
		t.Fatalf("GetByKey: %v", err)
	}
	scribble(byKey)
	list, err := b.s.List(b.ctx, "app", task.Scheduled, task.ID{}, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v; want 1 task", list, err)
	}
	scribble(list[0])
	if diff := cmp.Diff(want, b.get(t, want.ID), cmpOpts); diff != "" {
		t.Fatalf("after changing Get's, GetByKey's and List's results (-want +got):\n%s", diff)
	}

	// fn's argument and Update's result are copies too, even when fn keeps
	// its argument.
	var kept *task.Task
	got, err := b.s.Update(b.ctx, want.ID, nil, func(t *task.Task) error {
		t.Attempts = 1
		kept = t
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	want.Attempts = 1
	scribble(kept)
	scribble(got)
	if diff := cmp.Diff(want, b.get(t, want.ID), cmpOpts); diff != "" {
		t.Fatalf("after changing Update's fn argument and result (-want +got):\n%s", diff)
	}

	// A duplicate's result is a copy as well.
	res, err = b.s.Create(b.ctx, []*task.Task{b.newTask("app", time.Minute, withKey("k"))})
	if err != nil || res[0].Created {
		t.Fatalf("Create(duplicate) = %v, %v", res, err)
	}
	scribble(res[0].Task)
	if diff := cmp.Diff(want, b.get(t, want.ID), cmpOpts); diff != "" {
		t.Fatalf("after changing a duplicate's result (-want +got):\n%s", diff)
	}
}
