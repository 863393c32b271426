package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium with a fresh profile and returns a
// context for a tab. Without Chromium the test is skipped, except in CI.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: .ci/run installs it (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is missing; install it: apt-get install -y chromium", chromiumPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers have a small /dev/shm
		chromedp.WindowSize(1360, 1000),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelTab)
	return ctx
}

// pageErrors collects the page's uncaught exceptions and console.error
// calls until ctx ends; wait returns them.
func pageErrors(ctx context.Context) (wait func() []string) {
	var (
		mu   sync.Mutex
		errs []string
		done = make(chan struct{})
	)
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			// The browser's own log (a 401 fetch, say) has a Source;
			// the page's console calls and exceptions do not.
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source == "") {
				mu.Lock()
				errs = append(errs, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return errs
	}
}

// artifactDir is where screenshots go: $TOC_ARTIFACTS when set, else the
// test's artifact directory (kept with go test -artifacts).
func artifactDir(t *testing.T) string {
	if d := os.Getenv("TOC_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// poll waits until the JavaScript expression is truthy.
func poll(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, text)
	}
}

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestBrowser drives the dashboard in headless Chromium against the real
// server: it signs in with a token, finds a task by app and key, retries a
// dead task from its app's dead letters and sees it delivered, and saves
// screenshots.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	s := startStack(t, true)
	api := s.client(adminToken)
	bg := context.Background()

	ok := newReceiver(t, false)
	flaky := newReceiver(t, true)

	// Some deliveries spread over a few seconds, for the lateness chart.
	for i := range 40 {
		if _, _, err := api.Schedule(bg, client.ScheduleRequest{App: "shop", Key: fmt.Sprint("paid-", i),
			Delay: task.Duration(time.Duration(i) * 75 * time.Millisecond), Target: ok.target(), Payload: []byte(`{"order":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	scheduled, _, err := api.Schedule(bg, client.ScheduleRequest{App: "shop", Key: "order-1234", Delay: task.Duration(time.Hour),
		Target: ok.target(), Payload: []byte(`{"order":1234,"reason":"unpaid"}`)})
	if err != nil {
		t.Fatal(err)
	}
	dead, _, err := api.Schedule(bg, client.ScheduleRequest{App: "billing", Key: "refund-77", Target: flaky.target(),
		Payload: []byte(`{"refund":77}`),
		Retry:   &task.RetryPolicy{MaxAttempts: 2, MinBackoff: task.Duration(time.Millisecond), MaxBackoff: task.Duration(time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, api, dead.ID, task.Dead)

	errs := pageErrors(ctx)

	// The page asks for a token, then shows the apps.
	do(t, ctx, "open the dashboard", chromedp.Navigate(s.url+"/ui/"))
	poll(t, ctx, "the token prompt", `document.querySelector('#token-form.need') !== null`)
	do(t, ctx, "enter the token",
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("token-save")))
	poll(t, ctx, "the apps", `document.querySelector('#apps-table tr[data-app="shop"]') !== null && document.querySelector('#apps-table tr[data-app="billing"] td[data-state="dead"]').textContent === "1"`)
	// The token is remembered.
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem('toc.token')`))
	if err != nil || stored != adminToken {
		t.Errorf("localStorage token = %q, %v", stored, err)
	}

	// Find the scheduled task by app and key.
	do(t, ctx, "look up by key",
		chromedp.Click(chromedp.CSS(`a[data-nav="task"]`)),
		chromedp.WaitVisible(chromedp.ID("lookup-app")),
		chromedp.SendKeys(chromedp.ID("lookup-app"), "shop"),
		chromedp.SendKeys(chromedp.ID("lookup-key"), "order-1234"),
		chromedp.Click(chromedp.ID("lookup-go")))
	poll(t, ctx, "the scheduled task", `document.querySelector('#task-state').textContent === 'scheduled'`)
	got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("task-id")))
	if err != nil || got != scheduled.ID.String() {
		t.Errorf("task id shown = %q, %v; want %s", got, err, scheduled.ID)
	}
	payload, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("task-payload")))
	if err != nil || !strings.Contains(payload, `"reason": "unpaid"`) {
		t.Errorf("payload shown = %q, %v", payload, err)
	}
	screenshot(t, ctx, "task-scheduled.png")

	// The receiver is back: retry the dead task from the dead letters.
	flaky.setFail(false)
	row := fmt.Sprintf(`#list-table tr[data-id="%s"]`, dead.ID)
	do(t, ctx, "open app billing", chromedp.Navigate(s.url+"/ui/#/"))
	poll(t, ctx, "the apps table", `document.querySelector('#apps-table tr[data-app="billing"]') !== null`)
	do(t, ctx, "click app billing", chromedp.Click(chromedp.CSS(`#apps-table tr[data-app="billing"] a`)))
	poll(t, ctx, "the dead letter", `document.querySelector('`+row+` button.retry') !== null`)
	poll(t, ctx, "the app's settings", `document.querySelector('#app-settings dt') !== null`)
	screenshot(t, ctx, "app-dead-letters.png")
	do(t, ctx, "click Retry", chromedp.Click(chromedp.CSS(row+` button.retry`)))
	poll(t, ctx, "the retried task delivered", `document.querySelector('`+row+` .state-cell').textContent === 'delivered'`)
	waitState(t, api, dead.ID, task.Delivered)

	// Its history tells the story.
	do(t, ctx, "open the task", chromedp.Click(chromedp.CSS(row+` a`)))
	poll(t, ctx, "the delivered task", `document.querySelector('#task-state').textContent === 'delivered' && document.querySelector('#task-id').textContent === '`+dead.ID.String()+`'`)
	history, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("history")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"created", "failed", "dead", "retried", "delivered", "500"} {
		if !strings.Contains(history, want) {
			t.Errorf("history lacks %q:\n%s", want, history)
		}
	}
	screenshot(t, ctx, "task-history.png")

	// The overview: counts and the lateness chart.
	do(t, ctx, "open the overview", chromedp.Click(chromedp.CSS(`a[data-nav="overview"]`)))
	do(t, ctx, "show the last minute", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#chart-range'); s.value = '60'; s.dispatchEvent(new Event('change')); })()`))
	poll(t, ctx, "the chart", `document.querySelectorAll('#chart path.p50').length === 1`)
	poll(t, ctx, "the counts", `document.querySelector('#totals .card.delivered .n').textContent === '41'`)
	screenshot(t, ctx, "overview.png")

	chromedp.Cancel(ctx)
	for _, e := range errs() {
		t.Errorf("page error: %s", e)
	}
}
