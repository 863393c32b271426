package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// RunSchedules runs the conformance suite of [store.Schedules]. open must
// return a fresh, empty store that implements it (itself or through a
// [store.Wrapper]); the suite fails if it does not. Like [Run], each
// subtest opens its own store, runs in parallel with the others and closes
// the store when it ends.
//
// Schedules are made the way the engine makes them: ids from the
// generator tasks use, times at millisecond precision in UTC, and, on a
// store that is a [Sharder], the id's shard that of the schedule's (app,
// key), as for a keyed task. Reads are compared at millisecond precision,
// nil and empty maps and slices alike.
func RunSchedules(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *schedBundle)
	}{
		{"Create", testScheduleCreate},
		{"Create/Idempotent", testScheduleCreateIdempotent},
		{"Create/Concurrent", testScheduleCreateConcurrent},
		{"Create/SameID", testScheduleCreateSameID},
		{"Create/Refused", testScheduleCreateRefused},
		{"Get/NotFound", testScheduleGetNotFound},
		{"List", testScheduleList},
		{"Update/Persists", testScheduleUpdatePersists},
		{"Update/FnError", testScheduleUpdateFnError},
		{"Update/Identity", testScheduleUpdateIdentity},
		{"Update/NotFound", testScheduleUpdateNotFound},
		{"Update/Concurrent", testScheduleUpdateConcurrent},
		{"Delete", testScheduleDelete},
		{"Delete/NotFound", testScheduleDeleteNotFound},
		{"Due", testScheduleDue},
		{"Due/Updates", testScheduleDueUpdates},
		{"Count", testScheduleCount},
		{"Copies", testScheduleCopies},
		{"Fields", testScheduleFields},
		{"Close", testScheduleClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, schedulesOf(t, setup(t, open(t))))
		})
	}
}

// schedBundle is what a schedule subtest works with.
type schedBundle struct {
	*bundle
	sc      store.Schedules
	sharder Sharder // nil unless the store places schedules by their key
}

// schedulesOf returns b with the store's Schedules, failing the test when
// it has none.
func schedulesOf(t *testing.T, b *bundle) *schedBundle {
	t.Helper()
	sc, ok := store.As[store.Schedules](b.s)
	if !ok {
		t.Fatalf("%T does not implement store.Schedules", b.s)
	}
	sh, _ := store.As[Sharder](b.s)
	return &schedBundle{bundle: b, sc: sc, sharder: sh}
}

// newSchedule returns a schedule filled the way the engine makes one: an
// active every-15m schedule in UTC whose next occurrence, and WakeAt, is
// 15 minutes from now, with an HTTP target, a JSON payload and a deadline.
// opts change it further; the id's shard is set last, from the key.
func (b *schedBundle) newSchedule(app, key string, opts ...func(*task.Schedule)) *task.Schedule {
	next := b.now.Add(15 * time.Minute)
	s := &task.Schedule{
		ID:        b.gen.New(b.now, 0),
		App:       app,
		Key:       key,
		Every:     task.Duration(15 * time.Minute),
		Timezone:  "UTC",
		CatchUp:   task.CatchUpOne,
		State:     task.ScheduleActive,
		NextAt:    &next,
		CreatedAt: b.now,
		UpdatedAt: b.now,
		Payload:   []byte(`{"report":"daily"}`),
		// A W3C trace context, which every store must keep.
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:  "rojo=00f067aa0ba902b7",
		Target: task.Target{HTTP: &task.HTTPTarget{
			URL:     "https://example.com/report",
			Headers: map[string]string{"X-Trace": "abc"},
			Timeout: task.Duration(5 * time.Second),
		}},
		Retry:         task.RetryPolicy{}.WithDefaults(),
		DeadlineAfter: task.Duration(10 * time.Minute),
		Anchor:        b.now,
		WakeAt:        next,
	}
	for _, o := range opts {
		o(s)
	}
	if b.sharder != nil {
		s.ID = s.ID.WithShard(b.sharder.ShardFor(s.App, s.Key, s.ID))
	}
	return s
}

// schedWake sets WakeAt and NextAt to at, or both to none when at is zero.
func schedWake(at time.Time) func(*task.Schedule) {
	return func(s *task.Schedule) {
		s.WakeAt = at
		s.NextAt = nil
		if !at.IsZero() {
			s.NextAt = &at
		}
	}
}

// paused pauses the schedule, as the engine does: nothing next.
func paused(s *task.Schedule) {
	s.State = task.SchedulePaused
	s.NextAt = nil
	s.WakeAt = time.Time{}
}

// applySchedule returns a copy of s changed by opts.
func applySchedule(s *task.Schedule, opts ...func(*task.Schedule)) *task.Schedule {
	c := s.Clone()
	for _, o := range opts {
		o(c)
	}
	return c
}

// createSchedules stores schedules that must all be new, and checks what
// CreateSchedule returns.
func (b *schedBundle) createSchedules(t *testing.T, ss ...*task.Schedule) {
	t.Helper()
	for _, s := range ss {
		got, created, err := b.sc.CreateSchedule(b.ctx, s)
		if err != nil {
			t.Fatalf("CreateSchedule(%s %q/%q): %v", s.ID, s.App, s.Key, err)
		}
		if !created {
			t.Fatalf("CreateSchedule(%s %q/%q) did not create it", s.ID, s.App, s.Key)
		}
		if d := diff(s, got); d != "" {
			t.Fatalf("CreateSchedule(%s) returned (-want +got):\n%s", s.ID, d)
		}
	}
}

// updateSchedule runs UpdateSchedule with fn = opts and checks what it
// returns, which it returns.
func (b *schedBundle) updateSchedule(t *testing.T, old *task.Schedule, opts ...func(*task.Schedule)) *task.Schedule {
	t.Helper()
	want := applySchedule(old, opts...)
	got, err := b.sc.UpdateSchedule(b.ctx, old.ID, func(s *task.Schedule) error {
		for _, o := range opts {
			o(s)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSchedule(%s): %v", old.ID, err)
	}
	if d := diff(want, got); d != "" {
		t.Fatalf("UpdateSchedule(%s) returned (-want +got):\n%s", old.ID, d)
	}
	return want
}

// wantDue is what DueSchedules(until, ∞) returns.
func wantDue(all []*task.Schedule, until time.Time) []*task.Schedule {
	var out []*task.Schedule
	for _, s := range all {
		if !s.WakeAt.IsZero() && s.WakeAt.UnixMilli() <= until.UnixMilli() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *task.Schedule) int {
		return cmp.Or(cmp.Compare(a.WakeAt.UnixMilli(), b.WakeAt.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	return out
}

// wantScheduleList is what ListSchedules(app, zero, ∞) returns.
func wantScheduleList(all []*task.Schedule, app string) []*task.Schedule {
	var out []*task.Schedule
	for _, s := range all {
		if s.App == app {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *task.Schedule) int { return compareIDs(a.ID, b.ID) })
	return out
}

// wantScheduleCounts is what CountSchedules returns.
func wantScheduleCounts(all []*task.Schedule) map[string]map[task.ScheduleState]int64 {
	out := map[string]map[task.ScheduleState]int64{}
	for _, s := range all {
		if out[s.App] == nil {
			out[s.App] = map[task.ScheduleState]int64{}
		}
		out[s.App][s.State]++
	}
	return out
}

// listAll reads app's whole list in pages of size.
func (b *schedBundle) listAll(t *testing.T, app string, size int) []*task.Schedule {
	t.Helper()
	var got []*task.Schedule
	var after task.ID
	for {
		page, err := b.sc.ListSchedules(b.ctx, app, after, size)
		if err != nil {
			t.Fatalf("ListSchedules(%q): %v", app, err)
		}
		if len(page) > size {
			t.Fatalf("ListSchedules(%q, limit %d) returned %d", app, size, len(page))
		}
		got = append(got, page...)
		if len(page) < size {
			return got
		}
		after = page[len(page)-1].ID
	}
}

// checkSchedules compares everything the store can be asked about
// schedules with the model, given that want is exactly the set of stored
// schedules: each by id and by key, every app's list (paged), the due order
// up to now and to the far future, and the counts.
func checkSchedules(t *testing.T, b *schedBundle, want []*task.Schedule) {
	t.Helper()
	apps := map[string]bool{"no-such-app": true}
	for _, w := range want {
		apps[w.App] = true
		got, err := b.sc.GetSchedule(b.ctx, w.ID)
		if err != nil {
			t.Errorf("GetSchedule(%s): %v", w.ID, err)
			continue
		}
		if d := diff(w, got); d != "" {
			t.Errorf("GetSchedule(%s) (-want +got):\n%s", w.ID, d)
		}
		got, err = b.sc.GetScheduleByKey(b.ctx, w.App, w.Key)
		if err != nil {
			t.Errorf("GetScheduleByKey(%q, %q): %v", w.App, w.Key, err)
			continue
		}
		if d := diff(w, got); d != "" {
			t.Errorf("GetScheduleByKey(%q, %q) (-want +got):\n%s", w.App, w.Key, d)
		}
	}
	for app := range apps {
		for _, size := range []int{2, 1 << 20} {
			if d := diff(wantScheduleList(want, app), b.listAll(t, app, size)); d != "" {
				t.Errorf("ListSchedules(%q), paged by %d (-want +got):\n%s", app, size, d)
			}
		}
		n := len(wantScheduleList(want, app))
		for _, limit := range []int{1, 2, 1 << 20} {
			got, err := b.sc.CountAppSchedules(b.ctx, app, limit)
			if err != nil {
				t.Fatalf("CountAppSchedules(%q, %d): %v", app, limit, err)
			}
			if got != min(n, limit) {
				t.Errorf("CountAppSchedules(%q, %d) = %d, want %d", app, limit, got, min(n, limit))
			}
		}
	}
	for _, until := range []time.Time{b.now, farFuture} {
		got, err := b.sc.DueSchedules(b.ctx, until, 1<<20)
		if err != nil {
			t.Fatalf("DueSchedules: %v", err)
		}
		if d := diff(wantDue(want, until), got); d != "" {
			t.Errorf("DueSchedules(%s) (-want +got):\n%s", until, d)
		}
	}
	counts, err := b.sc.CountSchedules(b.ctx)
	if err != nil {
		t.Fatalf("CountSchedules: %v", err)
	}
	if d := diff(wantScheduleCounts(want), counts); d != "" {
		t.Errorf("CountSchedules (-want +got):\n%s", d)
	}
}

func testScheduleCreate(t *testing.T, b *schedBundle) {
	checkSchedules(t, b, nil) // an empty store
	a := b.newSchedule("app", "daily")
	o := b.newSchedule("app", "hourly", func(s *task.Schedule) { s.Every = task.Duration(time.Hour) })
	same := b.newSchedule("other", "daily") // the same key in another app
	b.createSchedules(t, a, o, same)
	checkSchedules(t, b, []*task.Schedule{a, o, same})
}

// testScheduleCreateIdempotent creates a schedule again under its key: the
// store returns the one it has, unchanged, and stores nothing.
func testScheduleCreateIdempotent(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	again := b.newSchedule("app", "daily", func(s *task.Schedule) {
		s.Every = task.Duration(time.Minute)
		s.Payload = []byte("other")
		s.WakeAt = b.now.Add(-time.Hour)
	})
	got, created, err := b.sc.CreateSchedule(b.ctx, again)
	if err != nil {
		t.Fatalf("CreateSchedule(a taken key): %v", err)
	}
	if created {
		t.Error("CreateSchedule(a taken key) created it")
	}
	if d := diff(a, got); d != "" {
		t.Errorf("CreateSchedule(a taken key) returned (-want the schedule that has it +got):\n%s", d)
	}
	if _, err := b.sc.GetSchedule(b.ctx, again.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(the id of the refused one) error = %v, want ErrNotFound", err)
	}
	checkSchedules(t, b, []*task.Schedule{a})
}

// testScheduleCreateConcurrent creates one key from many goroutines at
// once, each with its own id: one creates it, all get that one.
func testScheduleCreateConcurrent(t *testing.T, b *schedBundle) {
	const goroutines = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []*task.Schedule
		got     []task.ID
	)
	for range goroutines {
		s := b.newSchedule("app", "contended")
		wg.Go(func() {
			res, created, err := b.sc.CreateSchedule(b.ctx, s)
			if err != nil {
				t.Errorf("CreateSchedule: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			got = append(got, res.ID)
			if created {
				winners = append(winners, s)
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent CreateSchedules of one key created it, want 1", len(winners), goroutines)
	}
	for _, id := range got {
		if id != winners[0].ID {
			t.Errorf("a CreateSchedule returned %s, not the stored %s", id, winners[0].ID)
		}
	}
	checkSchedules(t, b, winners)
}

// testScheduleCreateSameID creates a schedule with the id of another: the
// store refuses it and keeps the other.
func testScheduleCreateSameID(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	dup := b.newSchedule("app", "other")
	dup.ID = a.ID
	if got, created, err := b.sc.CreateSchedule(b.ctx, dup); err == nil {
		t.Errorf("CreateSchedule(the id of another) = %v, %v, nil; want an error", got, created)
	}
	if _, err := b.sc.GetScheduleByKey(b.ctx, "app", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetScheduleByKey(the refused key) error = %v, want ErrNotFound", err)
	}
	checkSchedules(t, b, []*task.Schedule{a})
}

// testScheduleCreateRefused checks that what no store keeps is refused
// (record.CheckSchedule) and nothing is stored.
func testScheduleCreateRefused(t *testing.T, b *schedBundle) {
	zeroID := b.newSchedule("app", "zero-id")
	zeroID.ID = task.ID{}
	for _, s := range []*task.Schedule{
		zeroID,
		b.newSchedule("app", ""),
		b.newSchedule("app", "odd-state", func(s *task.Schedule) { s.State = "sleeping" }),
	} {
		if got, created, err := b.sc.CreateSchedule(b.ctx, s); err == nil {
			t.Errorf("CreateSchedule(%+v) = %v, %v, nil; want an error", s, got, created)
		}
	}
	checkSchedules(t, b, nil)
}

func testScheduleGetNotFound(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	if _, err := b.sc.GetSchedule(b.ctx, b.gen.New(b.now, 0)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(missing) error = %v, want ErrNotFound", err)
	}
	for _, k := range [][2]string{{"app", "nope"}, {"other", "daily"}, {"app", "Daily"}, {"app", "daily "}, {"ap", "pdaily"}} {
		if _, err := b.sc.GetScheduleByKey(b.ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetScheduleByKey(%q, %q) error = %v, want ErrNotFound", k[0], k[1], err)
		}
	}
	// A task with the schedule's id or key is not a schedule, nor the
	// other way round.
	tk := b.newTask("app", time.Minute, withKey("daily"))
	b.create(t, tk)
	if _, err := b.sc.GetSchedule(b.ctx, tk.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(a task's id) error = %v, want ErrNotFound", err)
	}
	if _, err := b.s.Get(b.ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(a schedule's id) error = %v, want ErrNotFound", err)
	}
	checkSchedules(t, b, []*task.Schedule{a})
	check(t, b.bundle, []*task.Task{tk})
}

// testScheduleList pages through apps whose names prefix each other.
func testScheduleList(t *testing.T, b *schedBundle) {
	var all []*task.Schedule
	for i := range 14 {
		app := []string{"a", "a", "ab", "b"}[i%4]
		all = append(all, b.newSchedule(app, fmt.Sprintf("key-%d", i)))
	}
	b.createSchedules(t, all...)
	checkSchedules(t, b, all)

	full := wantScheduleList(all, "a")
	if len(full) != 8 {
		t.Fatalf("the model lists %d schedules of app a, want 8", len(full))
	}
	for _, tc := range []struct {
		after task.ID
		limit int
		want  []*task.Schedule
	}{
		{task.ID{}, 3, full[:3]},
		{full[2].ID, 3, full[3:6]},
		{full[5].ID, 3, full[6:]},
		{full[6].ID, 1, full[7:]},
		{full[7].ID, 3, nil},
		{task.ID{}, 0, nil},
		{task.ID{}, -1, nil},
	} {
		got, err := b.sc.ListSchedules(b.ctx, "a", tc.after, tc.limit)
		if err != nil {
			t.Fatalf("ListSchedules: %v", err)
		}
		if d := diff(tc.want, got); d != "" {
			t.Errorf("ListSchedules(a, after %s, limit %d) (-want +got):\n%s", tc.after, tc.limit, d)
		}
	}
}

func testScheduleUpdatePersists(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	o := b.newSchedule("app", "other")
	b.createSchedules(t, a, o)
	last := b.now.Add(15 * time.Minute)
	a = b.updateSchedule(t, a, paused, func(s *task.Schedule) {
		s.LastAt = &last
		s.Payload = []byte{0xff, 0x00, 'x'}
		s.Target = task.Target{Pull: &task.PullTarget{}}
		s.UpdatedAt = b.now.Add(time.Second)
	})
	checkSchedules(t, b, []*task.Schedule{a, o})

	start, end := b.now.Add(time.Hour), b.now.AddDate(1, 0, 0)
	a = b.updateSchedule(t, a, schedWake(b.now.Add(-time.Minute)), func(s *task.Schedule) {
		s.State = task.ScheduleActive
		s.Cron, s.Every = "0 9 * * MON-FRI", 0
		s.Timezone = "Europe/Berlin"
		s.StartAt, s.EndAt = &start, &end
		s.CatchUp = task.CatchUpAll
		s.Payload = nil
		s.Retry.MaxAttempts = 3
		s.DeadlineAfter = 0
		s.Anchor = b.now.Add(time.Minute)
	})
	checkSchedules(t, b, []*task.Schedule{a, o})
}

func testScheduleUpdateFnError(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	sentinel := errors.New("engine says no")
	var called bool
	_, err := b.sc.UpdateSchedule(b.ctx, a.ID, func(s *task.Schedule) error {
		called = true
		// Change everything an index depends on, then refuse.
		paused(s)
		s.State = task.ScheduleEnded
		s.Payload[0] = 'X'
		s.Target.HTTP.Headers["X-Trace"] = "changed"
		return sentinel
	})
	if !called {
		t.Fatal("UpdateSchedule did not call fn")
	}
	if err != sentinel { // the contract says unchanged: not wrapped
		t.Errorf("UpdateSchedule error = %v, want the error fn returned, unchanged", err)
	}
	checkSchedules(t, b, []*task.Schedule{a})
}

// testScheduleUpdateIdentity checks that an fn that changes the id, app or
// key is refused rather than let the store's indexes go astray.
func testScheduleUpdateIdentity(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	for _, change := range []func(*task.Schedule){
		func(s *task.Schedule) { s.ID = b.gen.New(b.now, 0) },
		func(s *task.Schedule) { s.App = "other" },
		func(s *task.Schedule) { s.Key = "other" },
	} {
		if _, err := b.sc.UpdateSchedule(b.ctx, a.ID, func(s *task.Schedule) error { change(s); return nil }); err == nil {
			t.Error("UpdateSchedule changing the schedule's identity succeeded")
		}
	}
	checkSchedules(t, b, []*task.Schedule{a})
}

func testScheduleUpdateNotFound(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	tk := b.newTask("app", time.Minute)
	b.create(t, tk)
	for _, id := range []task.ID{b.gen.New(b.now, 0), tk.ID} {
		_, err := b.sc.UpdateSchedule(b.ctx, id, func(*task.Schedule) error {
			t.Error("fn called for a missing schedule")
			return nil
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("UpdateSchedule(missing) error = %v, want ErrNotFound", err)
		}
	}
	checkSchedules(t, b, []*task.Schedule{a})
}

// testScheduleUpdateConcurrent bumps a counter (Every, in nanoseconds) from
// many goroutines: no increment may be lost, and each update sees the one
// before.
func testScheduleUpdateConcurrent(t *testing.T, b *schedBundle) {
	const goroutines, each = 8, 20
	a := b.newSchedule("app", "daily")
	o := b.newSchedule("app", "other")
	b.createSchedules(t, a, o)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen []task.Duration
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				got, err := b.sc.UpdateSchedule(b.ctx, a.ID, func(s *task.Schedule) error {
					s.Every++
					return nil
				})
				if err != nil {
					t.Errorf("UpdateSchedule: %v", err)
					return
				}
				mu.Lock()
				seen = append(seen, got.Every-a.Every)
				mu.Unlock()
			}
		})
	}
	// Other schedules are not held up meanwhile.
	o = b.updateSchedule(t, o, func(s *task.Schedule) { s.Timezone = "Asia/Tokyo" })
	wg.Wait()

	slices.Sort(seen)
	want := make([]task.Duration, goroutines*each)
	for i := range want {
		want[i] = task.Duration(i + 1)
	}
	if d := gocmp.Diff(want, seen); d != "" {
		t.Errorf("increments returned by the updates (-want +got):\n%s", d)
	}
	a.Every += goroutines * each
	checkSchedules(t, b, []*task.Schedule{a, o})
}

// testScheduleDelete deletes a schedule: it is gone from every read, and
// its key is free for a new one.
func testScheduleDelete(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	o := b.newSchedule("app", "other", schedWake(b.now.Add(-time.Minute)))
	b.createSchedules(t, a, o)
	a = b.updateSchedule(t, a, schedWake(b.now.Add(-time.Hour)))
	if err := b.sc.DeleteSchedule(b.ctx, a.ID); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	if _, err := b.sc.GetSchedule(b.ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(deleted) error = %v, want ErrNotFound", err)
	}
	if _, err := b.sc.GetScheduleByKey(b.ctx, "app", "daily"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetScheduleByKey(deleted) error = %v, want ErrNotFound", err)
	}
	if _, err := b.sc.UpdateSchedule(b.ctx, a.ID, func(*task.Schedule) error {
		t.Error("UpdateSchedule called fn for a deleted schedule")
		return nil
	}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSchedule(deleted) error = %v, want ErrNotFound", err)
	}
	checkSchedules(t, b, []*task.Schedule{o})

	// The key is free again: a new schedule takes it.
	again := b.newSchedule("app", "daily", func(s *task.Schedule) { s.Cron, s.Every = "@hourly", 0 })
	b.createSchedules(t, again)
	checkSchedules(t, b, []*task.Schedule{o, again})
	if err := b.sc.DeleteSchedule(b.ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSchedule(deleted) error = %v, want ErrNotFound", err)
	}
	checkSchedules(t, b, []*task.Schedule{o, again})
}

func testScheduleDeleteNotFound(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	tk := b.newTask("app", time.Minute)
	b.create(t, tk)
	for _, id := range []task.ID{b.gen.New(b.now, 0), tk.ID, {}} {
		if err := b.sc.DeleteSchedule(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteSchedule(%s) error = %v, want ErrNotFound", id, err)
		}
	}
	checkSchedules(t, b, []*task.Schedule{a})
	check(t, b.bundle, []*task.Task{tk})
}

// testScheduleDue checks the due order: (WakeAt, ID) over every app, up to
// until, at most limit, never a schedule without a WakeAt.
func testScheduleDue(t *testing.T, b *schedBundle) {
	at := func(d time.Duration) func(*task.Schedule) { return schedWake(b.now.Add(d)) }
	all := []*task.Schedule{
		b.newSchedule("a", "s0", at(time.Minute)),
		b.newSchedule("b", "s1", at(-time.Hour)),
		b.newSchedule("a", "s2", at(0)),
		b.newSchedule("c", "s3", at(time.Millisecond)),
		b.newSchedule("b", "s4", at(0)), // ties with s2: id order
		b.newSchedule("a", "s5", paused),
		b.newSchedule("a", "s6", schedWake(time.Unix(-5, 0).UTC())), // before 1970
		b.newSchedule("c", "s7", at(-time.Millisecond)),
		b.newSchedule("a", "s8", schedWake(farFuture.Add(time.Millisecond))),
		b.newSchedule("b", "s9", paused, func(s *task.Schedule) { s.State = task.ScheduleEnded }),
	}
	b.createSchedules(t, all...)
	checkSchedules(t, b, all)
	due := wantDue(all, farFuture)
	if len(due) != 7 {
		t.Fatalf("the model has %d schedules due, want 7", len(due))
	}
	for _, tc := range []struct {
		until time.Time
		limit int
		want  []*task.Schedule
	}{
		{b.now, 100, wantDue(all, b.now)},
		{b.now.Add(-time.Millisecond), 100, wantDue(all, b.now.Add(-time.Millisecond))},
		{b.now.Add(time.Millisecond - time.Microsecond), 100, wantDue(all, b.now)}, // milliseconds
		{farFuture, 3, due[:3]},
		{farFuture, 0, nil},
		{farFuture, -1, nil},
		{time.Unix(-6, 0), 100, nil},
		{time.Unix(-5, 0), 100, due[:1]},
		{farFuture.AddDate(100, 0, 0), 100, wantDue(all, farFuture.AddDate(100, 0, 0))},
	} {
		got, err := b.sc.DueSchedules(b.ctx, tc.until, tc.limit)
		if err != nil {
			t.Fatalf("DueSchedules: %v", err)
		}
		if d := diff(tc.want, got); d != "" {
			t.Errorf("DueSchedules(%s, %d) (-want +got):\n%s", tc.until, tc.limit, d)
		}
	}
}

// testScheduleDueUpdates checks that updates move a schedule in the due
// order, take it out (zero WakeAt) and put it back.
func testScheduleDueUpdates(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "a", schedWake(b.now.Add(-time.Minute)))
	o := b.newSchedule("app", "o", schedWake(b.now.Add(-time.Second)))
	b.createSchedules(t, a, o)
	checkSchedules(t, b, []*task.Schedule{a, o})
	a = b.updateSchedule(t, a, schedWake(b.now)) // after o now
	checkSchedules(t, b, []*task.Schedule{a, o})
	a = b.updateSchedule(t, a, paused) // out
	checkSchedules(t, b, []*task.Schedule{a, o})
	a = b.updateSchedule(t, a, schedWake(b.now.Add(-time.Hour)), func(s *task.Schedule) { s.State = task.ScheduleActive })
	checkSchedules(t, b, []*task.Schedule{a, o})
	a = b.updateSchedule(t, a, schedWake(b.now.Add(time.Hour))) // later than now
	checkSchedules(t, b, []*task.Schedule{a, o})
}

func testScheduleCount(t *testing.T, b *schedBundle) {
	var all []*task.Schedule
	for i := range 9 {
		s := b.newSchedule([]string{"a", "b", "c"}[i%3], fmt.Sprintf("k%d", i))
		switch i % 4 {
		case 1:
			paused(s)
		case 2:
			paused(s)
			s.State = task.ScheduleEnded
		}
		all = append(all, s)
	}
	b.createSchedules(t, all...)
	checkSchedules(t, b, all)
	all[0] = b.updateSchedule(t, all[0], paused)
	if err := b.sc.DeleteSchedule(b.ctx, all[1].ID); err != nil {
		t.Fatal(err)
	}
	all = slices.Delete(all, 1, 2)
	checkSchedules(t, b, all)
}

// testScheduleCopies checks that the caller and the store share no memory:
// neither what was passed in nor what came out changes the stored schedule.
func testScheduleCopies(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	want := a.Clone()
	mutate := func(s *task.Schedule) {
		s.Payload[0] = 'X'
		s.Target.HTTP.Headers["X-Trace"] = "changed"
		s.Target.HTTP.URL = "https://elsewhere"
		*s.NextAt = s.NextAt.Add(time.Hour)
		s.Every = 1
	}
	got, _, err := b.sc.CreateSchedule(b.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	mutate(a)
	mutate(got)
	checkSchedules(t, b, []*task.Schedule{want})

	reads := map[string]func() (*task.Schedule, error){
		"GetSchedule":      func() (*task.Schedule, error) { return b.sc.GetSchedule(b.ctx, want.ID) },
		"GetScheduleByKey": func() (*task.Schedule, error) { return b.sc.GetScheduleByKey(b.ctx, "app", "daily") },
		"ListSchedules": func() (*task.Schedule, error) {
			l, err := b.sc.ListSchedules(b.ctx, "app", task.ID{}, 10)
			if err != nil || len(l) != 1 {
				return nil, fmt.Errorf("ListSchedules = %v, %v", l, err)
			}
			return l[0], nil
		},
		"DueSchedules": func() (*task.Schedule, error) {
			l, err := b.sc.DueSchedules(b.ctx, farFuture, 10)
			if err != nil || len(l) != 1 {
				return nil, fmt.Errorf("DueSchedules = %v, %v", l, err)
			}
			return l[0], nil
		},
		"CreateSchedule (taken)": func() (*task.Schedule, error) {
			s, _, err := b.sc.CreateSchedule(b.ctx, b.newSchedule("app", "daily"))
			return s, err
		},
	}
	for name, read := range reads {
		got, err := read()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mutate(got)
		checkSchedules(t, b, []*task.Schedule{want})
	}

	// Neither what fn was given, kept past the update, nor what the update
	// returned.
	var kept *task.Schedule
	got, err = b.sc.UpdateSchedule(b.ctx, want.ID, func(s *task.Schedule) error {
		s.Timezone = "Asia/Tokyo"
		kept = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want.Timezone = "Asia/Tokyo"
	mutate(kept)
	mutate(got)
	checkSchedules(t, b, []*task.Schedule{want})
}

// testScheduleFields stores schedules that between them set every field,
// and each optional one both set and not, and reads them back.
func testScheduleFields(t *testing.T, b *schedBundle) {
	t1, t2 := b.now.Add(-time.Hour), b.now.Add(24*time.Hour)
	t3, t4 := b.now.Add(time.Minute), b.now.Add(-24*time.Hour)
	all := []*task.Schedule{
		b.newSchedule("app", "cron-everything", func(s *task.Schedule) {
			s.Cron, s.Every = "0 9 * * MON-FRI", 0
			s.Timezone = "America/New_York"
			s.StartAt, s.EndAt, s.NextAt, s.LastAt = &t1, &t2, &t3, &t4
			s.CatchUp = task.CatchUpAll
			s.UpdatedAt = b.now.Add(time.Second)
			s.Payload = []byte{0xff, 0xfe, 0x00, '"', '\\', 0xc3, 0x28} // not UTF-8, not JSON
			s.Target = task.Target{HTTP: &task.HTTPTarget{
				URL:     "https://example.com/a?b=c",
				Headers: map[string]string{"Authorization": "Bearer t", "X-Ü": "ünïcode"},
				Timeout: task.Duration(1500 * time.Millisecond),
			}}
			s.Retry = task.RetryPolicy{MaxAttempts: 7, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Hour)}
			s.DeadlineAfter = task.Duration(90 * time.Second)
			s.Anchor = b.now.Add(-48 * time.Hour)
			s.WakeAt = t3
		}),
		b.newSchedule("app", "bare", func(s *task.Schedule) {
			s.Every = task.Duration(time.Second)
			s.StartAt, s.EndAt, s.NextAt, s.LastAt = nil, nil, nil, nil
			s.CatchUp = task.CatchUpSkip
			s.Payload = nil
			s.Target = task.Target{Pull: &task.PullTarget{}}
			s.Retry = task.RetryPolicy{}
			s.DeadlineAfter = 0
			s.Anchor = time.Time{}
			s.WakeAt = time.Time{}
		}),
		b.newSchedule("app", "amqp", func(s *task.Schedule) {
			s.Target = task.Target{AMQP: &task.AMQPTarget{URL: "main", Exchange: "x", RoutingKey: "r"}}
			s.Payload = []byte{}
		}),
		b.newSchedule("app", "nats", paused, func(s *task.Schedule) {
			s.State = task.ScheduleEnded
			s.Target = task.Target{NATS: &task.NATSTarget{Subject: "s.t"}}
			s.LastAt = &t4
		}),
		b.newSchedule("app", strings.Repeat("k", task.MaxScheduleKey)),
		b.newSchedule("app-ünï.code", "kéy\x00with\x01bytes"),
	}
	b.createSchedules(t, all...)
	checkSchedules(t, b, all)
}

func testScheduleClose(t *testing.T, b *schedBundle) {
	a := b.newSchedule("app", "daily")
	b.createSchedules(t, a)
	if err := b.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"CreateSchedule": func() error {
			_, _, err := b.sc.CreateSchedule(b.ctx, b.newSchedule("app", "new"))
			return err
		},
		"GetSchedule": func() error { _, err := b.sc.GetSchedule(b.ctx, a.ID); return err },
		"GetScheduleByKey": func() error {
			_, err := b.sc.GetScheduleByKey(b.ctx, "app", "daily")
			return err
		},
		"ListSchedules": func() error { _, err := b.sc.ListSchedules(b.ctx, "app", task.ID{}, 10); return err },
		"UpdateSchedule": func() error {
			_, err := b.sc.UpdateSchedule(b.ctx, a.ID, func(*task.Schedule) error {
				t.Error("UpdateSchedule called fn after Close")
				return nil
			})
			return err
		},
		"DeleteSchedule": func() error { return b.sc.DeleteSchedule(b.ctx, a.ID) },
		"DueSchedules":   func() error { _, err := b.sc.DueSchedules(b.ctx, farFuture, 10); return err },
		"CountSchedules": func() error { _, err := b.sc.CountSchedules(b.ctx); return err },
		"CountAppSchedules": func() error {
			_, err := b.sc.CountAppSchedules(b.ctx, "app", 10)
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: error = %v, want ErrClosed", name, err)
		}
	}
}

// scheduleDurability is RunDurability's part for a store that keeps
// schedules: they survive reopening, as do their deletion and the keys
// they hold. cur returns the bundle of the store open now; reopen closes it
// and opens it again.
func scheduleDurability(t *testing.T, cur func() *bundle, reopen func()) {
	t.Helper()
	b := schedulesOf(t, cur())
	var all []*task.Schedule
	for i := range 12 {
		s := b.newSchedule([]string{"a", "b"}[i%2], fmt.Sprintf("sched-%d", i), schedWake(b.now.Add(time.Duration(i-6)*time.Minute)))
		if i%5 == 4 {
			paused(s)
		}
		all = append(all, s)
	}
	b.createSchedules(t, all...)
	all[0] = b.updateSchedule(t, all[0], func(s *task.Schedule) { s.Every++; s.Payload = []byte{0xff} })
	if err := b.sc.DeleteSchedule(b.ctx, all[1].ID); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	deleted := all[1]
	all = slices.Delete(all, 1, 2)
	reopen()
	b = schedulesOf(t, cur())
	checkSchedules(t, b, all)

	// A key still held, and one deleted before reopening.
	got, created, err := b.sc.CreateSchedule(b.ctx, b.newSchedule(all[0].App, all[0].Key))
	if err != nil || created || got.ID != all[0].ID {
		t.Errorf("CreateSchedule of a key held before reopening = %v, %v, %v; want the holder %s", got, created, err, all[0].ID)
	}
	again := b.newSchedule(deleted.App, deleted.Key)
	b.createSchedules(t, again)
	all = append(all, again)
	all[2] = b.updateSchedule(t, all[2], paused)
	reopen()
	checkSchedules(t, schedulesOf(t, cur()), all)
}
