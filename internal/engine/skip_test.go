package engine

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/task"
)

// TestScheduleLastAtNextAt checks that a schedule tells the truth (issue
// 23 item 4): last_at is absent until an occurrence came due and then
// names its due time; next_at moves past a pending occurrence a user
// cancelled (skipped), to the occurrence made after it, which fires.
func TestScheduleLastAtNextAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		start := time.Now().UTC()
		s := mustCreate(t, b.eng, newSched("tick", every(time.Minute)))
		if s.LastAt != nil {
			t.Errorf("new schedule: last_at %v, want none", s.LastAt)
		}
		first := start.Add(time.Minute)
		time.Sleep(time.Minute + 2*time.Second)
		synctest.Wait()
		cur, err := b.eng.Schedules().Get(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.LastAt == nil || !cur.LastAt.Equal(first) || cur.NextAt == nil || !cur.NextAt.Equal(first.Add(time.Minute)) {
			t.Fatalf("after the first occurrence: last %v, next %v; want %v and a minute later", cur.LastAt, cur.NextAt, first)
		}

		// Skip the pending occurrence: cancel it by key.
		skip := *cur.NextAt
		if _, err := b.eng.CancelByKey(ctx, "app", task.OccurrenceKey("tick", skip)); err != nil {
			t.Fatal(err)
		}
		cur, err = b.eng.Schedules().Get(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		after := skip.Add(time.Minute)
		if cur.NextAt == nil || !cur.NextAt.Equal(after) || !cur.LastAt.Equal(first) {
			t.Fatalf("after cancelling the pending occurrence at %v: next %v, last %v; want %v and %v", skip, cur.NextAt, cur.LastAt, after, first)
		}
		tk, err := b.eng.GetByKey(ctx, "app", task.OccurrenceKey("tick", after))
		if err != nil || tk.State != task.Scheduled {
			t.Fatalf("the occurrence after the skipped one: %v, %v", tk, err)
		}
		time.Sleep(time.Until(after) + 2*time.Second)
		synctest.Wait()
		var fired []time.Time
		for _, d := range b.sink.deliveries() {
			fired = append(fired, d.at)
		}
		if len(fired) != 2 || !fired[0].Equal(first) || !fired[1].Equal(after) {
			t.Errorf("deliveries at %v, want %v and %v (not the skipped %v)", fired, first, after, skip)
		}
		cur, err = b.eng.Schedules().Get(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !cur.LastAt.Equal(after) || !cur.NextAt.Equal(after.Add(time.Minute)) {
			t.Errorf("after the occurrence after the skip: last %v, next %v", cur.LastAt, cur.NextAt)
		}
	})
}
