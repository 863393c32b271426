package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/task"
)

// Schedules inside their app's limits (issue 21, finding 4).

// TestScheduleOccurrencesWithinCreates: 50 schedules "* * * * * *" of an
// app limited to 5 creates a second make 5 occurrences a second, not 50;
// the ones held back are made late, keeping their due times, none
// dropped, and a plain create meanwhile is refused as over the limit.
func TestScheduleOccurrencesWithinCreates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var made, holds atomic.Int64
		b := setup(t, func(c *Config) {
			c.Hooks.OccurrencesCreated = func(app string, n int) { made.Add(int64(n)) }
			c.Hooks.ScheduleHeld = func(string) { holds.Add(1) }
		})
		start := time.Now().UTC()
		const n, rate = 50, 5
		ids := make([]task.ID, n)
		for i := range n {
			ids[i] = mustCreate(t, b.eng, newSched(fmt.Sprintf("s%d", i), cron("* * * * * *", "UTC"))).ID
		}
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"app": {CreatesPerSecond: rate}}})
		made.Store(0)

		const run = 20 * time.Second
		time.Sleep(run)
		synctest.Wait()
		// A token bucket of 5/s with a burst of 1: at most 5 × 20 + 1.
		if got := made.Load(); got > rate*int64(run/time.Second)+1 || got < rate*int64(run/time.Second)-rate {
			t.Errorf("%d occurrences made in %s at %d creates/s, want about %d", got, run, rate, rate*int64(run/time.Second))
		}
		t.Logf("%d occurrences made in %s at %d creates/s, %d holds", made.Load(), run, rate, holds.Load())
		if holds.Load() == 0 {
			t.Error("no ScheduleHeld hook while the schedules were held back")
		}
		// The schedules show that they are behind: next_at in the past.
		behind := 0
		for _, id := range ids {
			s, err := b.eng.Schedules().Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if s.NextAt != nil && s.NextAt.Before(time.Now()) {
				behind++
			}
		}
		if behind < n/2 {
			t.Errorf("%d of %d schedules have a next_at in the past, want most", behind, n)
		}
		// A plain create of the app is over the limit meanwhile.
		rs, err := b.eng.Create(t.Context(), []CreateParams{{App: "app", DueAt: time.Now().Add(time.Hour), Target: httpTarget}})
		var rl *RateLimitError
		if err != nil || !errors.As(rs[0].Err, &rl) {
			t.Errorf("plain create while the schedules use the limit: %v %v, want a RateLimitError", err, rs[0].Err)
		}

		// Lifted, the limit let every occurrence be made: each second of
		// each schedule once, the held back ones late.
		b.eng.SetPolicies(Policies{})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		end := time.Now()
		late := 0
		for i, id := range ids {
			occ := occurrences(t, b.eng, "app", id)
			want := int(end.Sub(start)/time.Second) + 1 // +1s .. the pending one after end
			if len(occ) != want {
				t.Errorf("schedule %d: %d occurrences, want %d", i, len(occ), want)
			}
			for k, o := range occ {
				if due := start.Add(time.Duration(k+1) * time.Second); !o.DueAt.Equal(due) {
					t.Errorf("schedule %d: occurrence %d due at +%s, want +%s", i, k, o.DueAt.Sub(start), due.Sub(start))
					break
				}
				if o.CreatedAt.After(o.DueAt) {
					late++
				}
			}
		}
		if late == 0 {
			t.Error("no occurrence was made late")
		}
		if len(b.sink.deliveries()) < n*int((end.Sub(start)-time.Second)/time.Second) {
			t.Errorf("%d deliveries, want every occurrence due by now", len(b.sink.deliveries()))
		}
	})
}

// TestScheduleCreatesAndCap: creating, changing and resuming a schedule
// take one of the app's creates (past it: a RateLimitError, nothing
// changed), and an app has at most MaxSchedules schedules (default
// MaxSchedulesDefault); a create of a key it has is still answered.
func TestScheduleCreatesAndCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		if got := b.eng.EffectivePolicy("app").MaxSchedules; got != MaxSchedulesDefault {
			t.Errorf("default max_schedules %d, want %d", got, MaxSchedulesDefault)
		}
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"app": {CreatesPerSecond: 5, MaxSchedules: 3}}})
		var rl *RateLimitError
		s1 := mustCreate(t, b.eng, newSched("a", every(time.Hour)))
		if _, _, err := b.eng.Schedules().Create(t.Context(), newSched("b", every(time.Hour))); !errors.As(err, &rl) {
			t.Fatalf("a second create at once at 5/s: %v, want a RateLimitError", err)
		}
		if _, err := b.eng.Schedules().GetByKey(t.Context(), "app", "b"); err == nil {
			t.Error("the refused create stored its schedule")
		}
		if _, err := b.eng.Schedules().Patch(t.Context(), s1.ID, SchedulePatch{Every: ptr(task.Duration(2 * time.Hour))}); !errors.As(err, &rl) {
			t.Fatalf("a PATCH at once: %v, want a RateLimitError", err)
		}
		if got, _ := b.eng.Schedules().Get(t.Context(), s1.ID); got.Every != task.Duration(time.Hour) {
			t.Errorf("the refused PATCH changed the schedule: every %s", got.Every.Std())
		}
		time.Sleep(200 * time.Millisecond)
		if _, err := b.eng.Schedules().Pause(t.Context(), s1.ID); err != nil {
			t.Fatalf("pause: %v", err) // takes no create
		}
		if _, err := b.eng.Schedules().Resume(t.Context(), s1.ID); err != nil {
			t.Fatalf("resume after 200ms: %v", err)
		}
		if _, err := b.eng.Schedules().Resume(t.Context(), s1.ID); err != nil {
			t.Fatalf("resume of an active schedule (no change): %v", err)
		}
		if _, err := b.eng.Schedules().Pause(t.Context(), s1.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.eng.Schedules().Resume(t.Context(), s1.ID); !errors.As(err, &rl) {
			t.Fatalf("a second resume at once: %v, want a RateLimitError", err)
		}

		// The cap: 3 schedules, then 409's error.
		for _, k := range []string{"b", "c"} {
			time.Sleep(200 * time.Millisecond)
			mustCreate(t, b.eng, newSched(k, every(time.Hour)))
		}
		time.Sleep(200 * time.Millisecond)
		var sl *ScheduleLimitError
		if _, _, err := b.eng.Schedules().Create(t.Context(), newSched("d", every(time.Hour))); !errors.As(err, &sl) || sl.Max != 3 || sl.App != "app" {
			t.Fatalf("a fourth schedule with max_schedules 3: %v, want a ScheduleLimitError", err)
		}
		time.Sleep(200 * time.Millisecond)
		if got, created, err := b.eng.Schedules().Create(t.Context(), newSched("a", every(time.Minute))); err != nil || created || got.ID != s1.ID {
			t.Errorf("an existing key at the cap: %v, created %v, err %v; want the schedule", got, created, err)
		}
		if err := b.eng.Schedules().Delete(t.Context(), s1.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		mustCreate(t, b.eng, newSched("d", every(time.Hour)))
		// Another app has its own cap; a negative cap is none.
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"app": {MaxSchedules: -1}}})
		mustCreate(t, b.eng, newSched("e", every(time.Hour)))
		mustCreate(t, b.eng, newSched("f", every(time.Hour)))
	})
}

// TestScheduleCapRacingCreates: creates racing past the pre-create count
// leave the app with at most MaxSchedules schedules.
func TestScheduleCapRacingCreates(t *testing.T) {
	b := setup(t, nil)
	const limit, racers = 5, 32
	b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"app": {MaxSchedules: limit}}})
	errs := make(chan error, racers)
	for i := range racers {
		go func() {
			_, _, err := b.eng.Schedules().Create(t.Context(), newSched(fmt.Sprintf("r%d", i), every(time.Hour)))
			errs <- err
		}()
	}
	ok := 0
	for range racers {
		var sl *ScheduleLimitError
		switch err := <-errs; {
		case err == nil:
			ok++
		case !errors.As(err, &sl):
			t.Errorf("create: %v, want success or a ScheduleLimitError", err)
		}
	}
	got, _, err := b.eng.Schedules().List(t.Context(), "app", task.ID{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > limit || len(got) != ok || ok == 0 {
		t.Errorf("%d schedules stored, %d creates answered ok, max_schedules %d", len(got), ok, limit)
	}
}
