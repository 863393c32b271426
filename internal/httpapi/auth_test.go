package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/task"
)

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// TestAuthMatrix checks every route against every kind of caller: the
// task's own app, another app, an admin, no token and a bad token.
//
// Every route that names another app's task (by id or by key) answers 404,
// exactly as for a task that does not exist; routes that name another app
// (create, list, claim, settings, bulk retry, cancel and ack) answer 403; no
// or a bad token answers 401.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	acc, err := httpapi.NewAccess([]string{digest("admin-token")}, map[string][]string{
		"shop":  {digest("shop-token")},
		"other": {digest("other-token")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A second handler over the same engine, with tokens.
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, Access: acc}))
	t.Cleanup(hs.Close)

	admin := client.New(client.Config{BaseURL: hs.URL, Token: "admin-token"})
	ctx := context.Background()
	// A fresh scheduled pull task of shop for each row (rows change state).
	newTask := func() *task.Task {
		tk, _, err := admin.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: fmt.Sprint(time.Now().UnixNano()),
			Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}

	type route struct {
		name, method, path, body string
		app                      bool // names the app, not a task: 403 for another app; task routes get 404
		ok                       int  // status for the own app and admin
	}
	routes := func(tk *task.Task) []route {
		id := tk.ID.String()
		return []route{
			{"create", "POST", "/v1/tasks", `{"app":"shop","delay":"1h","target":{"pull":{}}}`, true, 201},
			{"batch", "POST", "/v1/tasks:batch", `{"tasks":[{"app":"shop","delay":"1h","target":{"pull":{}}}]}`, true, 200},
			{"get", "GET", "/v1/tasks/" + id, ``, false, 200},
			{"get by key", "GET", "/v1/apps/shop/keys/" + tk.Key, ``, false, 200},
			{"app settings", "GET", "/v1/apps/shop", ``, true, 200},
			{"list", "GET", "/v1/apps/shop/tasks?state=scheduled", ``, true, 200},
			{"retry all", "POST", "/v1/apps/shop/tasks:retry", `{"state":"dead"}`, true, 200},
			{"cancel all", "POST", "/v1/apps/shop/tasks:cancel", `{"state":"scheduled","key_prefix":"no-such-key"}`, true, 200},
			{"patch", "PATCH", "/v1/tasks/" + id, `{"delay":"2h"}`, false, 200},
			{"claim", "POST", "/v1/apps/shop/claim", `{}`, true, 200},
			{"ack", "POST", "/v1/tasks/" + id + "/ack", `{"lease":"x"}`, false, 409},
			{"nack", "POST", "/v1/tasks/" + id + "/nack", `{"lease":"x"}`, false, 409},
			{"ack many", "POST", "/v1/apps/shop/tasks:ack", `{"acks":[{"id":"` + id + `","lease":"x"}]}`, true, 200}, // the item carries the 409
			{"retry", "POST", "/v1/tasks/" + id + "/retry", ``, false, 409},
			{"cancel", "DELETE", "/v1/tasks/" + id, ``, false, 204},
			{"cancel by key", "DELETE", "/v1/apps/shop/keys/" + tk.Key, ``, false, 204},
		}
	}
	callers := []struct {
		name, token string
		want        func(r route) int
	}{
		{"own app", "shop-token", func(r route) int { return r.ok }},
		{"admin", "admin-token", func(r route) int { return r.ok }},
		{"other app", "other-token", func(r route) int {
			if r.name == "batch" {
				return 200 // the item carries the 403
			}
			if r.app {
				return 403
			}
			return 404
		}},
		{"no token", "", func(route) int { return 401 }},
		{"bad token", "not-a-token", func(route) int { return 401 }},
	}
	for _, c := range callers {
		for _, r := range routes(newTask()) {
			t.Run(c.name+"/"+r.name, func(t *testing.T) {
				req, _ := http.NewRequest(r.method, hs.URL+r.path, strings.NewReader(r.body))
				if c.token != "" {
					req.Header.Set("Authorization", "Bearer "+c.token)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body strings.Builder
				_, _ = fmt.Fprint(&body, resp.Status)
				buf := make([]byte, 512)
				n, _ := resp.Body.Read(buf)
				resp.Body.Close()
				if want := c.want(r); resp.StatusCode != want {
					t.Fatalf("%s %s as %s: %d, want %d: %s", r.method, r.path, c.name, resp.StatusCode, want, buf[:n])
				}
				if r.name == "batch" && c.name == "other app" && !strings.Contains(string(buf[:n]), `"forbidden"`) {
					t.Errorf("batch item for another app: %s, want a forbidden error", buf[:n])
				}
				if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
	}

	// For another app's task, every task route answers byte for byte what
	// it answers for a task that does not exist: no existence oracle.
	call := func(method, path, body string) string {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer other-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b)
	}
	absent := &task.Task{ID: new(task.IDGenerator).New(time.Now(), 0), Key: "no-such-key"}
	for i, r := range routes(newTask()) {
		if r.app {
			continue
		}
		a := routes(absent)[i]
		if got, want := call(r.method, r.path, r.body), call(a.method, a.path, a.body); got != want {
			t.Errorf("%s of another app's task: %s\nbut of an absent task: %s", r.name, got, want)
		}
	}

	// Listing never shows another app's tasks, and health is open to all.
	other := client.New(client.Config{BaseURL: hs.URL, Token: "other-token"})
	page, err := other.List(ctx, "other", task.Scheduled, nil)
	if err != nil || len(page.Tasks) != 0 {
		t.Errorf("other app's own list: %v %v", page, err)
	}
	if err := client.New(client.Config{BaseURL: hs.URL}).Healthy(ctx); err != nil {
		t.Errorf("healthz without a token: %v", err)
	}
}
