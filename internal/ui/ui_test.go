package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/ui"
	"github.com/toc-dev/toc/task"
)

func get(t *testing.T, url, token string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestAssets checks that the dashboard is served to anyone, as files that
// only run their own code.
func TestAssets(t *testing.T) {
	s := startStack(t, true)
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/ui/", "text/html", `<script src="app.js"`},
		{"/ui/index.html", "text/html", "toc"},
		{"/ui/app.js", "javascript", "/v1/stats"},
		{"/ui/app.css", "text/css", ".chart"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	} {
		resp, body := get(t, s.url+tc.path, "")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", tc.path, resp.Status)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, tc.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.ctype)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		// Revalidation answers 304.
		resp, _ = get(t, s.url+tc.path, "", "If-None-Match", resp.Header.Get("ETag"))
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %s, want 304", tc.path, resp.Status)
		}
	}
	if resp, _ := get(t, s.url+"/ui/nope.js", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %s, want 404", resp.Status)
	}
	// No inline script or style: the CSP forbids them.
	for name, bad := range map[string][]string{"index.html": {"<script>", "style=", "onclick="}, "app.js": {"innerHTML", "eval("}} {
		_, body := get(t, s.url+"/ui/"+name, "")
		for _, b := range bad {
			if strings.Contains(string(body), b) {
				t.Errorf("%s contains %q", name, b)
			}
		}
	}
}

// TestStats checks GET /v1/stats: counts by app and state, scoped to the
// apps the token reaches.
func TestStats(t *testing.T) {
	s := startStack(t, true)
	ctx := context.Background()
	admin := s.client(adminToken)
	ok := newReceiver(t, false)
	for _, app := range []string{"shop", "shop", "billing"} {
		if _, _, err := admin.Schedule(ctx, client.ScheduleRequest{App: app, Delay: task.Duration(time.Hour), Target: ok.target()}); err != nil {
			t.Fatal(err)
		}
	}
	tk, _, err := admin.Schedule(ctx, client.ScheduleRequest{App: "shop", Target: ok.target()})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, admin, tk.ID, task.Delivered)
	zero := func(m map[task.State]int64) map[task.State]int64 {
		for _, st := range task.States {
			m[st] += 0
		}
		return m
	}
	shop := zero(map[task.State]int64{task.Scheduled: 2, task.Delivered: 1})
	billing := zero(map[task.State]int64{task.Scheduled: 1})

	for _, tc := range []struct {
		token  string
		status int
		apps   map[string]map[task.State]int64
		admin  bool
	}{
		{adminToken, http.StatusOK, map[string]map[task.State]int64{"shop": shop, "billing": billing}, true},
		{shopToken, http.StatusOK, map[string]map[task.State]int64{"shop": shop}, false},
		{"", http.StatusUnauthorized, nil, false},
		{"wrong", http.StatusUnauthorized, nil, false},
	} {
		var got ui.Stats
		testkit.WaitFor(t, 5*time.Second, "stats with the delivered task", func() bool {
			resp, body := get(t, s.url+"/v1/stats", tc.token)
			if resp.StatusCode != tc.status {
				t.Fatalf("GET /v1/stats with %q: %s: %s", tc.token, resp.Status, body)
			}
			if tc.status != http.StatusOK {
				return true
			}
			got = ui.Stats{}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			// Counts may be a second old.
			return got.Apps["shop"][task.Delivered] == 1
		})
		if tc.status != http.StatusOK {
			continue
		}
		if diff := cmp.Diff(tc.apps, got.Apps); diff != "" {
			t.Errorf("token %q: apps (-want +got):\n%s", tc.token, diff)
		}
		if got.Admin != tc.admin {
			t.Errorf("token %q: admin = %v, want %v", tc.token, got.Admin, tc.admin)
		}
		if got.Wheel < 0 || got.Ready != 0 {
			t.Errorf("token %q: wheel %d, ready %d", tc.token, got.Wheel, got.Ready)
		}
	}
	// The delivery shows in the recent seconds once its second is over.
	recent := func(token string) (attempts int64) {
		var got ui.Stats
		_, body := get(t, s.url+"/v1/stats", token)
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		for _, sec := range got.Recent {
			if sec.T <= 0 {
				t.Errorf("recent second %+v", sec)
			}
			attempts += sec.Count
		}
		return attempts
	}
	testkit.WaitFor(t, 3*time.Second, "the attempt in recent", func() bool { return recent(adminToken) == 1 })
	// A billing delivery shows to the admin, not to shop's token: an app
	// token sees its apps' lateness only.
	bt, _, err := admin.Schedule(ctx, client.ScheduleRequest{App: "billing", Target: ok.target()})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, admin, bt.ID, task.Delivered)
	testkit.WaitFor(t, 3*time.Second, "both attempts in recent", func() bool { return recent(adminToken) == 2 })
	if n := recent(shopToken); n != 1 {
		t.Errorf("shop's token sees %d attempts in recent, want shop's 1", n)
	}
}

// TestRequestLog checks that API answers carry X-Request-Id and that each
// request leaves one log line with it.
func TestRequestLog(t *testing.T) {
	s := startStack(t, false)
	resp, _ := get(t, s.url+"/v1/tasks/00000000000000000000000000000000", "", "X-Request-Id", "trace-42")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Request-Id") != "trace-42" {
		t.Errorf("GET a missing task: %s, X-Request-Id %q; want 404, trace-42", resp.Status, resp.Header.Get("X-Request-Id"))
	}
	testkit.WaitFor(t, time.Second, "the request's log line", func() bool {
		return strings.Contains(s.logs.String(), "status=404") && strings.Contains(s.logs.String(), "request_id=trace-42")
	})
}

// TestUIRedirect checks that /ui leads to the dashboard.
func TestUIRedirect(t *testing.T) {
	s := startStack(t, true)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(s.url + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %s to %q, want a redirect to /ui/", resp.Status, resp.Header.Get("Location"))
	}
}
