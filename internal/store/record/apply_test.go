package record

import (
	"errors"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

func TestApplyMany(t *testing.T) {
	var g task.IDGenerator
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func() *task.Task {
		return &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, UpdatedAt: now}
	}
	a, b, c, d := mk(), mk(), mk(), mk()
	refused := errors.New("no")
	paris := time.FixedZone("Paris", 3600)

	var given []*task.Task
	news, errs := ApplyMany([]*task.Task{a, nil, b, c, d}, func(xs []*task.Task) []error {
		given = xs
		if xs[1] != nil {
			t.Errorf("fn got %v for a task not stored", xs[1])
		}
		xs[0].Attempts = 1
		xs[0].UpdatedAt = now.In(paris)
		xs[2].Attempts = 2
		xs[3].App = "elsewhere"
		xs[4] = &task.Task{ID: d.ID, App: "a", Attempts: 9} // the slice itself is not read
		return []error{nil, nil, refused, nil, nil}
	})
	if errs[0] != nil || errs[1] != nil || errs[2] != refused || !errors.Is(errs[3], ErrChangedIdentity) || errs[4] != nil {
		t.Fatalf("errs = %v", errs)
	}
	if news[1] != nil || news[2] != nil || news[3] != nil {
		t.Errorf("news = %v: want nil where not stored or refused", news)
	}
	if news[0] == nil || news[0].Attempts != 1 || news[0].UpdatedAt.Location() != time.UTC {
		t.Errorf("news[0] = %+v: want 1 attempt, times in UTC", news[0])
	}
	if news[4] == nil || news[4].Attempts != 0 {
		t.Errorf("news[4] = %+v: want the task fn was given, unchanged", news[4])
	}
	if a.Attempts != 0 || b.Attempts != 0 || c.App != "a" {
		t.Error("fn changed the tasks as read")
	}
	given[0].Attempts = 50
	if news[0].Attempts != 1 {
		t.Error("a result shares memory with what fn was given")
	}
}

// TestApplyManyShared: shared, fn gets the tasks as read themselves, and
// what it puts in the slice is what is written (its copy, kept without
// another); an entry left as given is written unchanged, as a copy.
func TestApplyManyShared(t *testing.T) {
	var g task.IDGenerator
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func() *task.Task {
		return &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, UpdatedAt: now}
	}
	a, b, c, d := mk(), mk(), mk(), mk()
	paris := time.FixedZone("Paris", 3600)
	var mine *task.Task
	news, errs := ApplyManyWith([]*task.Task{a, b, c, d}, true, func(xs []*task.Task) []error {
		if xs[0] != a || xs[1] != b || xs[2] != c || xs[3] != d {
			t.Error("shared: fn did not get the tasks as read")
		}
		mine = xs[0].Clone()
		mine.Attempts = 1
		mine.UpdatedAt = now.In(paris)
		xs[0] = mine
		x := xs[2].Clone()
		x.App = "elsewhere"
		xs[2] = x
		return []error{nil, nil, nil, errSkipTest}
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrChangedIdentity) || errs[3] != errSkipTest {
		t.Fatalf("errs = %v", errs)
	}
	if news[0] != mine || mine.Attempts != 1 || mine.UpdatedAt.Location() != time.UTC {
		t.Errorf("news[0] = %+v: want fn's copy, normalized", news[0])
	}
	if news[1] == nil || news[1] == b || news[1].ID != b.ID {
		t.Errorf("news[1] = %p (b %p): want a copy of b, unchanged", news[1], b)
	}
	if news[2] != nil || news[3] != nil {
		t.Errorf("news = %v: want nil where refused", news)
	}
	if a.Attempts != 0 || c.App != "a" {
		t.Error("the tasks as read changed")
	}
}

var errSkipTest = errors.New("skip")

// TestApplyManyMisuse: a task twice in a batch, or a result of fn of
// another length, refuses the whole batch.
func TestApplyManyMisuse(t *testing.T) {
	var g task.IDGenerator
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	a := &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled}
	b := &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled}
	// A batch too large to be searched pair by pair (repeatedLinear),
	// with a gap, and the first task again last.
	large := []*task.Task{a, nil}
	for len(large) <= repeatedLinear {
		large = append(large, &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled})
	}
	large = append(large, a.Clone())
	for _, tt := range []struct {
		name string
		olds []*task.Task
		fn   func([]*task.Task) []error
	}{
		{"twice", []*task.Task{a, b, a.Clone()}, func(xs []*task.Task) []error {
			t.Error("fn called for a batch with a task twice")
			return make([]error, len(xs))
		}},
		{"twice in a large batch", large, func(xs []*task.Task) []error {
			t.Error("fn called for a batch with a task twice")
			return make([]error, len(xs))
		}},
		{"short result", []*task.Task{a, b}, func([]*task.Task) []error { return make([]error, 1) }},
		{"nil result", []*task.Task{a, b}, func([]*task.Task) []error { return nil }},
	} {
		news, errs := ApplyMany(tt.olds, tt.fn)
		if len(news) != len(tt.olds) || len(errs) != len(tt.olds) {
			t.Fatalf("%s: %d results and %d errors for %d tasks", tt.name, len(news), len(errs), len(tt.olds))
		}
		for i := range tt.olds {
			if news[i] != nil || errs[i] == nil {
				t.Errorf("%s: task %d: %v, %v; want nil and an error", tt.name, i, news[i], errs[i])
			}
		}
	}
}
