package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestScheduleLastAtNextAt checks that a schedule tells the truth (issue
// 23 item 4), on every backend: last_at is absent until an occurrence came
// due and then names a due time that passed; after its pending occurrence
// is cancelled by key (skipped), next_at names the occurrence after it,
// which exists.
func TestScheduleLastAtNextAt(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	ctx := context.Background()

	body := `{"app":"shop","key":"truth-tick","every":"1s","target":{"http":{"url":"` + rcv.URL + `/hook"}}}`
	code, sc, m := doSchedule(t, "POST", s.url+"/v1/schedules", body)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	if _, ok := m["last_at"]; ok || sc.NextAt == nil || !sc.NextAt.After(sc.CreatedAt) {
		t.Errorf("new schedule: last_at %v (want none), next_at %v (want after created_at %v)", m["last_at"], sc.NextAt, sc.CreatedAt)
	}
	var got *task.Schedule
	testkit.WaitFor(t, 10*time.Second, "last_at after an occurrence came due", func() bool {
		_, got, _ = doSchedule(t, "GET", s.url+"/v1/schedules/"+sc.ID.String(), "")
		return got != nil && got.LastAt != nil
	})
	now := time.Now()
	if got.LastAt.After(now) || got.NextAt == nil || !got.NextAt.After(*got.LastAt) {
		t.Errorf("last_at %v (want a passed due time, now %v), next_at %v (want after it)", got.LastAt, now, got.NextAt)
	}
	if tk, err := s.client.GetByKey(ctx, "shop", task.OccurrenceKey("truth-tick", *got.LastAt)); err != nil || tk.ScheduleID != sc.ID {
		t.Errorf("the occurrence at last_at %v: %v, %v", got.LastAt, tk, err)
	}

	body = `{"app":"shop","key":"truth-hourly","every":"1h","target":{"http":{"url":"` + rcv.URL + `/hook"}}}`
	code, hr, m := doSchedule(t, "POST", s.url+"/v1/schedules", body)
	if code != http.StatusCreated || hr.NextAt == nil {
		t.Fatalf("create: %d %v", code, m)
	}
	skipped := *hr.NextAt
	if code, m := do(t, "DELETE", s.url+"/v1/apps/shop/keys/"+url.PathEscape(task.OccurrenceKey("truth-hourly", skipped)), ""); code != http.StatusNoContent {
		t.Fatalf("cancel the pending occurrence by key: %d %v", code, m)
	}
	_, got, m = doSchedule(t, "GET", s.url+"/v1/schedules/"+hr.ID.String(), "")
	next := skipped.Add(time.Hour)
	if got == nil || got.NextAt == nil || !got.NextAt.Equal(next) || got.LastAt != nil {
		t.Fatalf("after its pending occurrence (%v) was cancelled: %v; want next_at %v and no last_at", skipped, m, next)
	}
	if tk, err := s.client.GetByKey(ctx, "shop", task.OccurrenceKey("truth-hourly", next)); err != nil || tk.State != task.Scheduled || tk.ScheduleID != hr.ID {
		t.Errorf("the occurrence at next_at: %v, %v", tk, err)
	}
}
