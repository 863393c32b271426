package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// These tests run in synctest bubbles, whose clock starts at 2000-01-01
// 00:00:00 UTC: a schedule created at once counts from midnight. Tests of
// other dates sleep there before they start an engine (an engine's loops
// would wake every second of the way).

// startOn starts an engine on st that delivers to rec, stopped at the end
// of the test (Stop is idempotent: a test may stop it earlier).
func startOn(t *testing.T, st store.Store, rec *recorder, mod func(*Config)) *Engine {
	t.Helper()
	cfg := Config{
		Store:  st,
		Sinks:  map[string]sink.Sink{"http": rec},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

// newSched returns a schedule of app "app" with the test target and key.
func newSched(key string, mod func(*task.Schedule)) *task.Schedule {
	s := &task.Schedule{App: "app", Key: key, Target: httpTarget, Payload: []byte(`{"v":1}`)}
	if mod != nil {
		mod(s)
	}
	return s
}

func every(d time.Duration) func(*task.Schedule) {
	return func(s *task.Schedule) { s.Every = task.Duration(d) }
}

func cron(expr, tz string) func(*task.Schedule) {
	return func(s *task.Schedule) { s.Cron, s.Timezone = expr, tz }
}

func mustCreate(t *testing.T, eng *Engine, s *task.Schedule) *task.Schedule {
	t.Helper()
	got, created, err := eng.Schedules().Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatalf("schedule %q: not created", s.Key)
	}
	return got
}

// occurrences returns the tasks of app made by schedule id, in due order.
func occurrences(t *testing.T, eng *Engine, app string, id task.ID) []*task.Task {
	t.Helper()
	var out []*task.Task
	for _, st := range task.States {
		var after task.ID
		for {
			ts, next, err := eng.List(t.Context(), app, st, after, MaxList)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				if tk.ScheduleID == id {
					out = append(out, tk)
				}
			}
			if next.IsZero() {
				break
			}
			after = next
		}
	}
	slices.SortFunc(out, func(a, b *task.Task) int { return a.DueAt.Compare(b.DueAt) })
	return out
}

// dueTimes returns the due times of ts as offsets from base.
func dueTimes(ts []*task.Task, base time.Time) []time.Duration {
	var out []time.Duration
	for _, tk := range ts {
		out = append(out, tk.DueAt.Sub(base))
	}
	return out
}

func inState(ts []*task.Task, s task.State) []*task.Task {
	var out []*task.Task
	for _, tk := range ts {
		if tk.State == s {
			out = append(out, tk)
		}
	}
	return out
}

func mins(ms ...int) []time.Duration {
	var out []time.Duration
	for _, m := range ms {
		out = append(out, time.Duration(m)*time.Minute)
	}
	return out
}

func TestScheduleFirstOccurrenceAtCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("report", every(time.Minute)))
		due := start.Add(time.Minute)
		if s.State != task.ScheduleActive || s.NextAt == nil || !s.NextAt.Equal(due) || s.Made == nil || !s.Made.Equal(due) || !s.WakeAt.Equal(due) {
			t.Fatalf("schedule after create: state %s, next %v, made %v, wake %v; want active and all at %v", s.State, s.NextAt, s.Made, s.WakeAt, due)
		}
		if s.LastAt != nil {
			t.Errorf("schedule after create: last_at %v, want none: no occurrence came due", s.LastAt)
		}
		if s.Timezone != "UTC" || s.CatchUp != task.CatchUpOne {
			t.Errorf("defaults: timezone %q, catch_up %q", s.Timezone, s.CatchUp)
		}
		tk, err := b.eng.GetByKey(t.Context(), "app", task.OccurrenceKey("report", due))
		if err != nil {
			t.Fatalf("first occurrence: %v", err)
		}
		if tk.ScheduleID != s.ID || tk.State != task.Scheduled || !tk.DueAt.Equal(due) || string(tk.Payload) != `{"v":1}` {
			t.Errorf("first occurrence: schedule %s, %s, due %v, payload %q", tk.ScheduleID, tk.State, tk.DueAt, tk.Payload)
		}
		if tk.Key != "report@2000-01-01T00:01:00.000Z" {
			t.Errorf("occurrence key %q", tk.Key)
		}

		// start_at later than the rule's first time: from start_at.
		at := start.Add(90 * time.Minute)
		s2 := mustCreate(t, b.eng, newSched("later", func(s *task.Schedule) { s.Cron, s.StartAt = "*/15 * * * *", &at }))
		if s2.NextAt == nil || !s2.NextAt.Equal(at) {
			t.Errorf("cron from start_at: next %v, want %v", s2.NextAt, at)
		}
		// A rule with no time before end_at: ended at once, no occurrence.
		end := start.Add(30 * time.Second)
		s3 := mustCreate(t, b.eng, newSched("never", func(s *task.Schedule) { s.Every, s.EndAt = task.Duration(time.Minute), &end }))
		if s3.State != task.ScheduleEnded || s3.NextAt != nil || !s3.WakeAt.IsZero() {
			t.Errorf("schedule past its end: %s, next %v", s3.State, s3.NextAt)
		}
		if n := len(occurrences(t, b.eng, "app", s3.ID)); n != 0 {
			t.Errorf("ended schedule made %d occurrences", n)
		}
	})
}

func TestScheduleOccurrencesFireOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now().UTC()
		end := start.Add(60 * time.Second)
		s := mustCreate(t, b.eng, newSched("tick", func(s *task.Schedule) { s.Every, s.EndAt = task.Duration(10*time.Second), &end }))
		for i := range 7 {
			// Just before each due time: one pending occurrence.
			time.Sleep(time.Until(start.Add(time.Duration(i+1)*10*time.Second - time.Millisecond)))
			synctest.Wait()
			occ := occurrences(t, b.eng, "app", s.ID)
			if pending := inState(occ, task.Scheduled); i < 6 && len(pending) != 1 {
				t.Fatalf("at +%ds: %d pending occurrences, want 1", (i+1)*10, len(pending))
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 6 {
			t.Fatalf("%d deliveries, want 6", len(got))
		}
		for i, d := range got {
			if want := start.Add(time.Duration(i+1) * 10 * time.Second); !d.at.Equal(want) {
				t.Errorf("delivery %d at +%s, want +%s", i, d.at.Sub(start), want.Sub(start))
			}
		}
		cur, err := b.eng.Schedules().Get(t.Context(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State != task.ScheduleEnded || cur.NextAt != nil || cur.LastAt == nil || !cur.LastAt.Equal(end) {
			t.Errorf("after its end: %s, next %v, last %v", cur.State, cur.NextAt, cur.LastAt)
		}
	})
}

// TestScheduleDST runs cron rules across DST changes through the engine,
// each in a bubble that sleeps to the day before it starts an engine.
func TestScheduleDST(t *testing.T) {
	cases := []struct {
		name, tz, cron string
		from           time.Time   // when the schedule is created
		fires          []time.Time // the deliveries, in UTC
	}{
		{"spring forward skips 02:30", "America/New_York", "30 2 * * *",
			time.Date(2027, 3, 14, 5, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2027, 3, 14, 7, 0, 0, 0, time.UTC), time.Date(2027, 3, 15, 6, 30, 0, 0, time.UTC)}},
		{"fall back repeats 01:30", "America/New_York", "30 1 * * *",
			time.Date(2027, 11, 7, 4, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2027, 11, 7, 5, 30, 0, 0, time.UTC), time.Date(2027, 11, 8, 6, 30, 0, 0, time.UTC)}},
		{"Berlin spring forward", "Europe/Berlin", "30 2 * * *",
			time.Date(2027, 3, 27, 23, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2027, 3, 28, 1, 0, 0, 0, time.UTC), time.Date(2027, 3, 29, 0, 30, 0, 0, time.UTC)}},
		{"Berlin fall back", "Europe/Berlin", "30 2 * * *",
			time.Date(2027, 10, 30, 23, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2027, 10, 31, 0, 30, 0, 0, time.UTC), time.Date(2027, 11, 1, 1, 30, 0, 0, time.UTC)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(c.from))
				b := setup(t, nil)
				s := mustCreate(t, b.eng, newSched("dst", cron(c.cron, c.tz)))
				if s.NextAt == nil || !s.NextAt.Equal(c.fires[0]) {
					t.Fatalf("first occurrence at %v, want %v", s.NextAt, c.fires[0])
				}
				time.Sleep(time.Until(c.fires[len(c.fires)-1]) + time.Second)
				synctest.Wait()
				var got []time.Time
				for _, d := range b.sink.deliveries() {
					got = append(got, d.at.UTC())
				}
				if !slices.EqualFunc(got, c.fires, time.Time.Equal) {
					t.Errorf("deliveries at %v, want %v", got, c.fires)
				}
			})
		})
	}
}

// TestScheduleCatchUp stops an engine across five occurrences of a
// schedule and starts another on the same store: what it makes of the
// missed ones follows the schedule's catch_up.
func TestScheduleCatchUp(t *testing.T) {
	for _, c := range []struct {
		catchUp task.CatchUp
		made    []time.Duration // occurrences, by due time
	}{
		{task.CatchUpSkip, mins(1, 7)},
		{task.CatchUpOne, mins(1, 6, 7)},
		{task.CatchUpAll, mins(1, 2, 3, 4, 5, 6, 7)},
	} {
		t.Run(string(c.catchUp), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, rec := memstore.New(), &recorder{}
				first := startOn(t, st, rec, nil)
				start := time.Now().UTC()
				s := mustCreate(t, first, newSched("sync", func(s *task.Schedule) {
					s.Every, s.CatchUp = task.Duration(time.Minute), c.catchUp
				}))
				time.Sleep(30 * time.Second)
				if err := first.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				// Down from +30s to +6m30s: the occurrence due at +1m was
				// made before; +2m to +6m were missed.
				time.Sleep(6 * time.Minute)
				restart := time.Now()
				second := startOn(t, st, rec, nil)
				synctest.Wait()
				time.Sleep(time.Until(start.Add(7*time.Minute)) + time.Millisecond)
				synctest.Wait()

				occ := occurrences(t, second, "app", s.ID)
				if got := dueTimes(occ, start); !slices.Equal(got, append(c.made, 8*time.Minute)) {
					t.Errorf("occurrences due at %v, want %v and the pending +8m0s", got, c.made)
				}
				var at []time.Duration
				for _, d := range rec.deliveries() {
					at = append(at, d.at.Sub(start))
				}
				slices.Sort(at) // those due at the restart fire together, in any order
				var want []time.Duration
				for _, m := range c.made {
					w := restart.Sub(start) // missed ones fire at once
					if m == 7*time.Minute {
						w = m
					}
					want = append(want, w)
				}
				if !slices.Equal(at, want) {
					t.Errorf("deliveries at %v, want %v", at, want)
				}
			})
		})
	}
}

// TestScheduleLateLoopIsNotDowntime: occurrences due after the process
// started are made even when the loop gets to them late, whatever the
// catch-up policy (a cluster node taking over a dead node's schedules).
func TestScheduleLateLoopIsNotDowntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var owns atomic.Bool
		b := setup(t, func(c *Config) { c.OwnsSchedule = func(task.ID) bool { return owns.Load() } })
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("late", func(s *task.Schedule) {
			s.Every, s.CatchUp = task.Duration(time.Minute), task.CatchUpSkip
		}))
		time.Sleep(4*time.Minute + 30*time.Second) // nobody owns it meanwhile
		owns.Store(true)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := dueTimes(occurrences(t, b.eng, "app", s.ID), start); !slices.Equal(got, mins(1, 2, 3, 4, 5)) {
			t.Errorf("occurrences due at %v, want +1m to +4m and the pending +5m", got)
		}
	})
}

func TestSchedulePauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("p", every(time.Minute)))
		time.Sleep(30 * time.Second)
		p, err := b.eng.Schedules().Pause(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p.State != task.SchedulePaused || p.NextAt != nil || !p.WakeAt.IsZero() {
			t.Fatalf("paused: %s, next %v, wake %v", p.State, p.NextAt, p.WakeAt)
		}
		if again, err := b.eng.Schedules().Pause(ctx, s.ID); err != nil || again.State != task.SchedulePaused {
			t.Errorf("pause again: %v, %v", again, err)
		}
		occ := occurrences(t, b.eng, "app", s.ID)
		if len(occ) != 1 || occ[0].State != task.Cancelled {
			t.Fatalf("after pause: %d occurrences, want the pending one cancelled", len(occ))
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n := len(b.sink.deliveries()); n != 0 {
			t.Fatalf("%d deliveries while paused", n)
		}
		resumedAt := time.Now().UTC()
		r, err := b.eng.Schedules().Resume(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		due := resumedAt.Add(time.Minute) // counts from the resume
		if r.State != task.ScheduleActive || r.NextAt == nil || !r.NextAt.Equal(due) {
			t.Fatalf("resumed: %s, next %v, want %v", r.State, r.NextAt, due)
		}
		time.Sleep(time.Until(due) + time.Millisecond)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 1 || !got[0].at.Equal(due) {
			t.Errorf("deliveries %+v, want one at +%s", got, due.Sub(start))
		}
	})
}

// TestScheduleResumeRevives: a cron schedule paused and resumed before its
// next time makes that time's occurrence again, though the pause cancelled
// a task with its key. An occurrence a user cancelled stays cancelled.
func TestScheduleResumeRevives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("hourly", cron("0 * * * *", "")))
		time.Sleep(10 * time.Minute)
		if _, err := b.eng.Schedules().Pause(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute)
		if _, err := b.eng.Schedules().Resume(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		one := start.Add(time.Hour)
		// A user skips the occurrence at 02:00 once it is pending.
		time.Sleep(time.Until(one) + time.Second)
		if _, err := b.eng.CancelByKey(ctx, "app", task.OccurrenceKey("hourly", start.Add(2*time.Hour))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start.Add(3*time.Hour)) + time.Millisecond)
		synctest.Wait()
		var at []time.Duration
		for _, d := range b.sink.deliveries() {
			at = append(at, d.at.Sub(start))
		}
		if want := []time.Duration{time.Hour, 3 * time.Hour}; !slices.Equal(at, want) {
			t.Errorf("deliveries at %v, want %v (02:00 skipped)", at, want)
		}
	})
}

func TestSchedulePatchReplacesPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("patched", every(time.Minute)))
		time.Sleep(20 * time.Second)

		// The payload alone: the pending occurrence keeps its time and
		// takes the new payload.
		payload := []byte(`{"v":2}`)
		if _, err := b.eng.Schedules().Patch(ctx, s.ID, SchedulePatch{Payload: &payload}); err != nil {
			t.Fatal(err)
		}
		occ := occurrences(t, b.eng, "app", s.ID)
		if len(occ) != 1 || occ[0].State != task.Scheduled || string(occ[0].Payload) != `{"v":2}` || !occ[0].DueAt.Equal(start.Add(time.Minute)) {
			t.Fatalf("after a payload patch: %d occurrences, first %s %q", len(occ), occ[0].State, occ[0].Payload)
		}

		// The rule: the pending one is cancelled, the next counts from the
		// PATCH.
		time.Sleep(10 * time.Second)
		at := time.Now().UTC()
		d := task.Duration(2 * time.Minute)
		p, err := b.eng.Schedules().Patch(ctx, s.ID, SchedulePatch{Every: &d})
		if err != nil {
			t.Fatal(err)
		}
		due := at.Add(2 * time.Minute)
		if p.NextAt == nil || !p.NextAt.Equal(due) || p.Made == nil || !p.Made.Equal(due) || p.LastAt != nil {
			t.Fatalf("after a rule patch: next %v, made %v, want %v; last %v, want none", p.NextAt, p.Made, due, p.LastAt)
		}
		occ = occurrences(t, b.eng, "app", s.ID)
		if len(occ) != 2 || occ[0].State != task.Cancelled || occ[1].State != task.Scheduled || !occ[1].DueAt.Equal(due) {
			t.Fatalf("after a rule patch: %v", dueTimes(occ, start))
		}
		time.Sleep(time.Until(due) + time.Millisecond)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 1 || !got[0].at.Equal(due) {
			t.Errorf("deliveries %+v, want one at %v", got, due)
		}

		// Bad input names the field and changes nothing.
		bad := "61 * * * *"
		var fe *task.FieldError
		if _, err := b.eng.Schedules().Patch(ctx, s.ID, SchedulePatch{Cron: &bad}); !errors.As(err, &fe) || fe.Field != "cron" {
			t.Errorf("patch with a bad cron: %v", err)
		}
		if _, err := b.eng.Schedules().Patch(ctx, s.ID, SchedulePatch{Cron: &bad, Every: &d}); !errors.As(err, &fe) || fe.Field != "cron" {
			t.Errorf("patch with cron and every: %v", err)
		}
	})
}

func TestScheduleDeleteFreesKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		s := mustCreate(t, b.eng, newSched("gone", every(time.Minute)))
		if err := b.eng.Schedules().Delete(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.eng.Schedules().Get(ctx, s.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get after delete: %v", err)
		}
		if err := b.eng.Schedules().Delete(ctx, s.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delete again: %v", err)
		}
		occ := occurrences(t, b.eng, "app", s.ID)
		if len(occ) != 1 || occ[0].State != task.Cancelled {
			t.Fatalf("after delete: %d occurrences", len(occ))
		}
		again := mustCreate(t, b.eng, newSched("gone", every(time.Minute)))
		if again.ID == s.ID {
			t.Error("the new schedule has the old id")
		}
		if err := b.eng.Schedules().DeleteByKey(ctx, "app", "gone"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n := len(b.sink.deliveries()); n != 0 {
			t.Errorf("%d deliveries of deleted schedules", n)
		}
	})
}

func TestScheduleIdempotentCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		s := mustCreate(t, b.eng, newSched("once", every(time.Minute)))
		time.Sleep(10 * time.Second)
		got, created, err := b.eng.Schedules().Create(ctx, newSched("once", cron("0 9 * * *", "Europe/Berlin")))
		if err != nil {
			t.Fatal(err)
		}
		if created || got.ID != s.ID || got.Every != s.Every || got.Cron != "" || !got.UpdatedAt.Equal(s.UpdatedAt) {
			t.Errorf("repeated create: created %v, %+v; want the first, unchanged", created, got)
		}
		if n := len(occurrences(t, b.eng, "app", s.ID)); n != 1 {
			t.Errorf("%d occurrences, want 1", n)
		}
	})
}

// TestScheduleTwoEngines runs two engines on one store, both stepping
// every schedule: each occurrence is made once.
func TestScheduleTwoEngines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		var created, occurred atomic.Int64
		count := func(c *Config) {
			c.Hooks.Created = func(_ string, n int) { created.Add(int64(n)) }
			c.Hooks.OccurrencesCreated = func(_ string, n int) { occurred.Add(int64(n)) }
		}
		a := startOn(t, st, &recorder{}, count)
		b := startOn(t, st, &recorder{}, count)
		start := time.Now().UTC()
		var ids []task.ID
		// Pull targets: two engines on one store are not a cluster, and
		// both would deliver a push task.
		for i, eng := range []*Engine{a, b, a, b} {
			s := mustCreate(t, eng, &task.Schedule{App: "app", Key: string(rune('a' + i)), Every: task.Duration(time.Second),
				Target: task.Target{Pull: &task.PullTarget{}}})
			ids = append(ids, s.ID)
		}
		time.Sleep(30*time.Second + 500*time.Millisecond)
		synctest.Wait()
		total := 0
		for _, id := range ids {
			occ := occurrences(t, a, "app", id)
			var want []time.Duration
			for i := 1; i <= 31; i++ {
				want = append(want, time.Duration(i)*time.Second)
			}
			if got := dueTimes(occ, start); !slices.Equal(got, want) {
				t.Errorf("schedule %s: occurrences due at %v, want +1s to +31s", id, got)
			}
			total += len(occ)
		}
		if n, o := created.Load(), occurred.Load(); n != int64(total) || o != int64(total) {
			t.Errorf("the engines reported %d tasks and %d occurrences created, the store has %d", n, o, total)
		}
	})
}

func TestScheduleValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now().UTC()
		before := start.Add(-time.Hour)
		for _, c := range []struct {
			field string
			mod   func(*task.Schedule)
		}{
			{"cron", cron("61 * * * *", "")},
			{"cron", cron("* * *", "")},
			{"cron", func(s *task.Schedule) {}},
			{"cron", func(s *task.Schedule) { s.Cron, s.Every = "* * * * *", task.Duration(time.Minute) }},
			{"timezone", cron("* * * * *", "Mars/Olympus")},
			{"every", every(500 * time.Millisecond)},
			{"end_at", func(s *task.Schedule) { s.Every, s.StartAt, s.EndAt = task.Duration(time.Minute), &start, &before }},
			{"catch_up", func(s *task.Schedule) { s.Every, s.CatchUp = task.Duration(time.Minute), "some" }},
			{"target", func(s *task.Schedule) { s.Every, s.Target = task.Duration(time.Minute), task.Target{} }},
			{"app", func(s *task.Schedule) { s.Every, s.App = task.Duration(time.Minute), "Bad App" }},
		} {
			var fe *task.FieldError
			_, _, err := b.eng.Schedules().Create(t.Context(), newSched("bad", c.mod))
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("%s: error %v, want a FieldError naming it", c.field, err)
			}
		}
		big := newSched("big", every(time.Minute))
		big.Payload = make([]byte, MaxPayloadDefault+1)
		if _, _, err := b.eng.Schedules().Create(t.Context(), big); !errors.Is(err, ErrTooLarge) {
			t.Errorf("payload over the limit: %v", err)
		}
	})
}

func TestScheduleNextTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		s := mustCreate(t, b.eng, newSched("next", cron("0 9 * * MON-FRI", "Europe/Berlin")))
		got, err := b.eng.Schedules().NextTimes(t.Context(), s.ID, 3)
		if err != nil {
			t.Fatal(err)
		}
		// 2000-01-01 is a Saturday; Berlin is UTC+1 in January.
		want := []string{"2000-01-03T09:00:00+01:00", "2000-01-04T09:00:00+01:00", "2000-01-05T09:00:00+01:00"}
		var gs []string
		for _, g := range got {
			gs = append(gs, g.Format(time.RFC3339))
		}
		if !slices.Equal(gs, want) {
			t.Errorf("next times %v, want %v", gs, want)
		}
		var fe *task.FieldError
		for _, n := range []int{0, 101} {
			if _, err := b.eng.Schedules().NextTimes(t.Context(), s.ID, n); !errors.As(err, &fe) || fe.Field != "n" {
				t.Errorf("n=%d: %v", n, err)
			}
		}
	})
}

// TestSchedulePauseWaitsForLoopStep: a pause that lands while the loop is
// stepping the schedule (the step has made the next occurrence but not yet
// written the schedule) answers only after the step took that occurrence
// back, so nothing is pending once the pause has answered. This was the
// flake of httpapi's TestScheduleLifecycle ("still pending after the
// pause"): the stray occurrence was cancelled a few ms after the answer.
func TestSchedulePauseWaitsForLoopStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var armed atomic.Bool
		entered, release := make(chan struct{}), make(chan struct{})
		b := setup(t, func(c *Config) {
			c.Hooks.OccurrencesCreated = func(string, int) {
				if armed.CompareAndSwap(true, false) {
					close(entered)
					<-release
				}
			}
		})
		ctx := t.Context()
		s := mustCreate(t, b.eng, newSched("p", every(time.Minute)))
		armed.Store(true)
		<-entered // the loop steps at the first occurrence (+1m): it made the second
		paused := make(chan error, 1)
		go func() {
			_, err := b.eng.Schedules().Pause(ctx, s.ID)
			paused <- err
		}()
		synctest.Wait()
		select {
		case err := <-paused:
			close(release)
			t.Fatalf("the pause answered (err %v) while the loop's step was under way", err)
		default:
		}
		close(release)
		if err := <-paused; err != nil {
			t.Fatal(err)
		}
		for _, o := range inState(occurrences(t, b.eng, "app", s.ID), task.Scheduled) {
			t.Errorf("occurrence due %s still pending after the pause", o.DueAt)
		}
	})
}
