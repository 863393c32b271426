package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestBrowserSchedules: an app's page lists its schedules (key, rule and
// zone, state, next and last occurrence); Pause stops one (its pending
// occurrence is cancelled) and Resume starts it again from now, through
// the API. Another app's schedules are not on the page.
func TestBrowserSchedules(t *testing.T) {
	ctx := browser(t)
	s := startStack(t, true)
	api := s.client(adminToken)
	bg := context.Background()

	ok := newReceiver(t, false)
	report, _, err := api.CreateSchedule(bg, client.CreateScheduleRequest{App: "shop", Key: "daily-report",
		Cron: "0 9 * * MON-FRI", Timezone: "Europe/Berlin", Target: ok.target(), Payload: []byte(`{"report":"daily"}`)})
	if err != nil {
		t.Fatal(err)
	}
	reconcile, _, err := api.CreateSchedule(bg, client.CreateScheduleRequest{App: "shop", Key: "reconcile",
		Every: task.Duration(15 * time.Minute), Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.CreateSchedule(bg, client.CreateScheduleRequest{App: "billing", Key: "close-books",
		Cron: "@monthly", Target: ok.target()}); err != nil {
		t.Fatal(err)
	}
	if report.NextAt == nil || reconcile.NextAt == nil {
		t.Fatalf("next_at of the new schedules: %v, %v", report.NextAt, reconcile.NextAt)
	}
	errs := pageErrors(ctx)

	do(t, ctx, "open the dashboard", chromedp.Navigate(s.url+"/ui/"))
	do(t, ctx, "enter the token",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("token-save")))
	// The pending occurrences are tasks: the app is listed.
	poll(t, ctx, "app shop", `document.querySelector('#apps-table tr[data-app="shop"]') !== null`)
	do(t, ctx, "open app shop", chromedp.Click(chromedp.CSS(`#apps-table tr[data-app="shop"] a`)))
	poll(t, ctx, "shop's two schedules", `document.querySelectorAll('#schedules-table tbody tr').length === 2`)

	row := func(sc *task.Schedule) string { return fmt.Sprintf(`#schedules-table tr[data-id="%s"]`, sc.ID) }
	cellText := func(sel string) string {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+sel+`').textContent`))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return got
	}
	for _, c := range []struct{ sel, want string }{
		{row(report) + ` td.key`, "daily-report"},
		{row(report) + ` td.rule`, "0 9 * * MON-FRI"},
		{row(report) + ` td.zone`, "Europe/Berlin"},
		{row(report) + ` td.state-cell`, "active"},
		{row(reconcile) + ` td.rule`, "every 15m0s"},
		{row(reconcile) + ` td.zone`, "UTC"},
		{row(reconcile) + ` td.state-cell`, "active"},
	} {
		if got := cellText(c.sel); got != c.want {
			t.Errorf("%s = %q, want %q", c.sel, got, c.want)
		}
	}
	// The next and last times are the API's, each a link to its
	// occurrence.
	for _, c := range []struct {
		cell string
		want *time.Time
	}{{"next", report.NextAt}, {"last", report.LastAt}} {
		sel := row(report) + ` td.` + c.cell
		if c.want == nil {
			if got := cellText(sel); got != "—" {
				t.Errorf("%s = %q, want —", sel, got)
			}
			continue
		}
		title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+sel+` a').title`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := time.Parse(time.RFC3339Nano, title); err != nil || !got.Equal(*c.want) {
			t.Errorf("%s shows %q (%v), want %s", c.cell, title, err, c.want)
		}
	}
	occKey := task.OccurrenceKey(report.Key, *report.NextAt)
	screenshot(t, ctx, "schedules.png")

	// Pause: the API says paused, and the pending occurrence is cancelled.
	do(t, ctx, "click Pause", chromedp.Click(chromedp.CSS(row(report)+` button.pause`)))
	poll(t, ctx, "the schedule paused", `document.querySelector('`+row(report)+` td.state-cell').textContent === 'paused' && document.querySelector('`+row(report)+` button.resume') !== null && document.querySelector('`+row(report)+` td.next').textContent === '—'`)
	got, err := api.GetSchedule(bg, report.ID)
	if err != nil || got.State != task.SchedulePaused || got.NextAt != nil {
		t.Fatalf("after Pause the schedule is %+v (%v), want paused with no next_at", got, err)
	}
	if occ, err := api.GetByKey(bg, "shop", occKey); err != nil || occ.State != task.Cancelled {
		t.Errorf("after Pause the occurrence %s is %v (%v), want cancelled", occKey, occ, err)
	}
	if got, err := api.GetSchedule(bg, reconcile.ID); err != nil || got.State != task.ScheduleActive {
		t.Errorf("the other schedule is %v (%v), want still active", got, err)
	}
	screenshot(t, ctx, "schedules-paused.png")

	// Resume: active again, with a next time.
	do(t, ctx, "click Resume", chromedp.Click(chromedp.CSS(row(report)+` button.resume`)))
	poll(t, ctx, "the schedule active", `document.querySelector('`+row(report)+` td.state-cell').textContent === 'active' && document.querySelector('`+row(report)+` button.pause') !== null && document.querySelector('`+row(report)+` td.next a') !== null`)
	got, err = api.GetSchedule(bg, report.ID)
	if err != nil || got.State != task.ScheduleActive || got.NextAt == nil {
		t.Fatalf("after Resume the schedule is %+v (%v), want active with a next_at", got, err)
	}

	// A reload shows what the server has.
	do(t, ctx, "refresh the schedules", chromedp.Click(chromedp.ID("schedules-refresh")))
	poll(t, ctx, "the refreshed list", `document.querySelectorAll('#schedules-table tbody tr').length === 2 && document.querySelector('`+row(report)+` td.state-cell').textContent === 'active'`)

	// Another app's page has its own schedules only.
	do(t, ctx, "open app billing", chromedp.Navigate(s.url+"/ui/#/apps/billing"))
	poll(t, ctx, "billing's schedule", `document.querySelectorAll('#schedules-table tbody tr').length === 1 && document.querySelector('#schedules-table td.key').textContent === 'close-books'`)

	chromedp.Cancel(ctx)
	for _, e := range errs() {
		t.Errorf("page error: %s", e)
	}
}
