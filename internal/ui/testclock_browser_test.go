package ui_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/task"
)

// TestBrowserTestClock: on a server on a test clock (issue #27) the
// dashboard shows a banner "test clock: <time>" that follows the clock
// as it is advanced, and counts relative times from it; an app token,
// which cannot read the clock, and a server on the wall clock show none.
func TestBrowserTestClock(t *testing.T) {
	ctx := browser(t)
	start := time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC)
	s := startStackOn(t, true, clock.NewTest(start))
	api := s.client(adminToken)
	errs := pageErrors(ctx)
	tk, _, err := api.Schedule(context.Background(), client.ScheduleRequest{App: "shop", Key: "order-1",
		Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}

	do(t, ctx, "open the dashboard", chromedp.Navigate(s.url+"/ui/#/"))
	poll(t, ctx, "the token prompt", `document.querySelector('#token-form.need') !== null`)
	do(t, ctx, "enter the admin token",
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("token-save")))
	poll(t, ctx, "the test clock banner", `(() => { const b = document.getElementById('test-clock');
		return !b.hidden && b.textContent.startsWith('test clock: ') && b.dataset.now === '2027-03-14T09:00:00Z'; })()`)

	if _, err := api.AdvanceClock(context.Background(), 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the banner following the clock", `document.getElementById('test-clock').dataset.now === '2027-03-14T09:30:00Z'`)
	do(t, ctx, "find the task", chromedp.Navigate(s.url+"/ui/#/tasks/"+tk.ID.String()))
	poll(t, ctx, "its due time 30m ahead of the clock", `document.body.textContent.includes('in 30m')`)

	do(t, ctx, "use the app token",
		chromedp.Evaluate[chromedp.Void](`document.getElementById('token').value = '`+shopToken+`'`),
		chromedp.Click(chromedp.ID("token-save")))
	poll(t, ctx, "no banner for an app token", `(() => { const b = document.getElementById('test-clock');
		return b.hidden && document.getElementById('live').className === 'live ok'; })()`)
	chromedp.Cancel(ctx)
	for _, e := range errs() {
		t.Errorf("page error: %s", e)
	}
}
