package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestBrowserLocalDev runs the dashboard of a toc without tokens (local
// development mode), where writes must be JSON and from toc's own origin:
// its Retry (a POST without a body) still works, and a page of another
// origin on the same machine cannot create a task (issue 21, finding 5:
// such a page made toc call a local service), whether it sends text/plain
// as a form would or JSON.
func TestBrowserLocalDev(t *testing.T) {
	ctx := browser(t)
	s := startStack(t, false)
	api := s.client("")
	bg := context.Background()
	flaky := newReceiver(t, true)
	dead, _, err := api.Schedule(bg, client.ScheduleRequest{App: "billing", Key: "refund-78", Target: flaky.target(),
		Retry: &task.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, api, dead.ID, task.Dead)
	errs := pageErrors(ctx)

	// The dashboard's Retry, from its own origin.
	flaky.setFail(false)
	row := fmt.Sprintf(`#list-table tr[data-id="%s"]`, dead.ID)
	do(t, ctx, "open the dashboard", chromedp.Navigate(s.url+"/ui/#/"))
	poll(t, ctx, "the apps table", `document.querySelector('#apps-table tr[data-app="billing"]') !== null`)
	do(t, ctx, "click app billing", chromedp.Click(chromedp.CSS(`#apps-table tr[data-app="billing"] a`)))
	poll(t, ctx, "the dead letter", `document.querySelector('`+row+` button.retry') !== null`)
	do(t, ctx, "click Retry", chromedp.Click(chromedp.CSS(row+` button.retry`)))
	poll(t, ctx, "the retried task delivered", `document.querySelector('`+row+` .state-cell').textContent === 'delivered'`)
	waitState(t, api, dead.ID, task.Delivered)

	// A page of another origin (another port of 127.0.0.1) tries to
	// create tasks that would call the receiver.
	hook := flaky.URL + "/hook"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>
window.results = [];
const body = (key) => JSON.stringify({app: "shop", key, delay: "0s", target: {http: {url: %q}}});
(async () => {
  for (const [key, init] of [
    ["as-text", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: body("as-text")}],
    ["as-json", {method: "POST", mode: "cors", headers: {"Content-Type": "application/json"}, body: body("as-json")}],
  ]) {
    try { await fetch(%q + "/v1/tasks", init); window.results.push(key + ": sent"); }
    catch (e) { window.results.push(key + ": " + e.message); }
  }
})();
</script>`, hook, s.url)
	}))
	t.Cleanup(page.Close)
	do(t, ctx, "open the other origin's page", chromedp.Navigate(page.URL+"/"))
	poll(t, ctx, "both requests sent", `window.results.length === 2`)
	for _, key := range []string{"as-text", "as-json"} {
		if tk, err := api.GetByKey(bg, "shop", key); err == nil {
			t.Errorf("a page of another origin created task %s (%s)", tk.ID, key)
		}
	}
	chromedp.Cancel(ctx)
	for _, e := range errs() {
		t.Errorf("page error: %s", e)
	}
}
