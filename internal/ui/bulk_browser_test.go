package ui_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestBrowserRetryAll: an app's endpoint was down and its tasks went dead;
// on the app's dead letters "Retry all" asks first, saying how many, then
// retries them all with the bulk route. They are delivered; another app's
// dead letters stay dead.
func TestBrowserRetryAll(t *testing.T) {
	ctx := browser(t)
	s := startStack(t, true)
	api := s.client(adminToken)
	bg := context.Background()

	flaky := newReceiver(t, true)
	var dead []*task.Task
	for i, app := range []string{"billing", "billing", "billing", "shop"} {
		tk, _, err := api.Schedule(bg, client.ScheduleRequest{App: app, Key: fmt.Sprint("refund-", i), Target: flaky.target(),
			Payload: []byte(`{"refund":1}`), Retry: &task.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, tk)
	}
	for _, tk := range dead {
		waitState(t, api, tk.ID, task.Dead)
	}
	errs := pageErrors(ctx)

	do(t, ctx, "open the dashboard", chromedp.Navigate(s.url+"/ui/"))
	do(t, ctx, "enter the token",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("token-save")))
	poll(t, ctx, "billing's counts", `document.querySelector('#apps-table tr[data-app="billing"] td[data-state="dead"]')?.textContent === "3"`)
	do(t, ctx, "open app billing", chromedp.Click(chromedp.CSS(`#apps-table tr[data-app="billing"] a`)))
	poll(t, ctx, "the dead letters and Retry all", `document.querySelectorAll('#list-table tbody tr').length === 3 && !document.querySelector('#list-retry-all').hidden`)

	// The endpoint is back. The first click only asks.
	flaky.setFail(false)
	do(t, ctx, "click Retry all", chromedp.Click(chromedp.ID("list-retry-all")))
	poll(t, ctx, "the confirmation", `document.querySelector('#list-retry-all').textContent === 'Retry 3 dead tasks?'`)
	screenshot(t, ctx, "retry-all-confirm.png")
	for _, tk := range dead[:3] {
		if got, err := api.Get(bg, tk.ID); err != nil || got.State != task.Dead {
			t.Fatalf("before the confirmation, %s is %v (%v), want still dead", tk.Key, got.State, err)
		}
	}
	do(t, ctx, "confirm", chromedp.Click(chromedp.ID("list-retry-all")))
	poll(t, ctx, "the banner", `document.querySelector('#banner').textContent.startsWith('Retried 3 dead tasks of app billing')`)
	for _, tk := range dead[:3] {
		waitState(t, api, tk.ID, task.Delivered)
	}
	do(t, ctx, "refresh the list", chromedp.Click(chromedp.ID("list-refresh")))
	poll(t, ctx, "no dead letters left", `document.querySelector('#list-empty').textContent === 'No dead tasks.' && document.querySelector('#list-retry-all').hidden`)
	screenshot(t, ctx, "retry-all-done.png")
	if got, err := api.Get(bg, dead[3].ID); err != nil || got.State != task.Dead {
		t.Errorf("shop's dead task is %v (%v), want still dead", got.State, err)
	}

	// Not offered where it does not apply.
	do(t, ctx, "show scheduled tasks", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#list-state'); s.value = 'scheduled'; s.dispatchEvent(new Event('change')); })()`))
	poll(t, ctx, "no Retry all for scheduled tasks", `document.querySelector('#list-empty').textContent === 'No scheduled tasks.' && document.querySelector('#list-retry-all').hidden`)

	chromedp.Cancel(ctx)
	for _, e := range errs() {
		t.Errorf("page error: %s", e)
	}
}
