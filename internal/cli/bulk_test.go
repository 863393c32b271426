package cli

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toc-dev/toc/client"
)

// answers returns each answer in turn, the last one from then on.
func answers(as ...answer) func(request) answer {
	var n atomic.Int64
	return func(request) answer {
		i := min(int(n.Add(1))-1, len(as)-1)
		return as[i]
	}
}

func TestBulk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		pattern    string
		answers    []answer
		app        string
		body       string // of every request
		stdout     string
		wantStderr string
	}{
		{
			name: "retry with every filter, repeated while there is more",
			args: []string{"retry", "--app", "billing", "--key-prefix", "refund/", "--due-after", "2026-03-01T09:00:00Z",
				"--due-before", "2026-03-01T10:00:00.5+01:00", "--limit", "700"},
			pattern:    "POST /v1/apps/{app}/tasks:retry",
			answers:    []answer{{200, `{"count":700,"more":true}`}, {200, `{"count":700,"more":true}`}, {200, `{"count":12}`}},
			app:        "billing",
			body:       `{"state":"dead","key_prefix":"refund/","due_after":"2026-03-01T09:00:00Z","due_before":"2026-03-01T10:00:00.5+01:00","limit":700}`,
			stdout:     "retried 1412 tasks\n",
			wantStderr: "retried 700 tasks so far, going on\nretried 1400 tasks so far, going on\n",
		},
		{
			name:    "retry expired, all",
			args:    []string{"retry", "--app", "billing", "--state", "expired", "--all"},
			pattern: "POST /v1/apps/{app}/tasks:retry",
			answers: []answer{{200, `{"count":3}`}},
			app:     "billing",
			body:    `{"state":"expired"}`,
			stdout:  "retried 3 tasks\n",
		},
		{
			name:    "cancel, flags before the action",
			args:    []string{"--app", "a.b", "--key-prefix", "promo/", "cancel"},
			pattern: "POST /v1/apps/{app}/tasks:cancel",
			answers: []answer{{200, `{"count":0}`}},
			app:     "a.b",
			body:    `{"state":"scheduled","key_prefix":"promo/"}`,
			stdout:  "cancelled 0 tasks\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, map[string]func(request) answer{tt.pattern: answers(tt.answers...)})
			stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"bulk"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			reqs := a.requests()
			if len(reqs) != len(tt.answers) {
				t.Fatalf("%d requests, want %d", len(reqs), len(tt.answers))
			}
			for _, r := range reqs {
				if r.Vars["app"] != tt.app {
					t.Errorf("app %q, want %q", r.Vars["app"], tt.app)
				}
				checkJSON(t, tt.body, r.Body)
			}
			if stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", stdout, tt.stdout)
			}
			if stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestBulkServerError(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{"POST /v1/apps/{app}/tasks:retry": answers(
		answer{200, `{"count":100000,"more":true}`},
		answer{503, `{"error":{"code":"not_ready","message":"toc: not ready"}}`},
	)})
	stdout, stderr, err := runCLI(t, serverEnv(a), "bulk", "retry", "--app", "billing", "--all")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 {
		t.Fatalf("err = %v, want the server's 503", err)
	}
	if stdout != "" || stderr != "retried 100000 tasks so far, going on\nretried 100000 tasks before this error\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}

	// A server that says more without changing anything is not asked again.
	a = newAPI(t, map[string]func(request) answer{"POST /v1/apps/{app}/tasks:cancel": fixed(200, `{"count":0,"more":true}`)})
	if _, _, err := runCLI(t, serverEnv(a), "bulk", "cancel", "--app", "shop", "--all"); err == nil || !strings.Contains(err.Error(), "more with no task changed") {
		t.Errorf("err = %v", err)
	}
	if n := len(a.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestBulkUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "bulk: give an action: retry or cancel"},
		{[]string{"delete", "--app", "a", "--all"}, `bulk: unknown action "delete": want retry or cancel`},
		{[]string{"retry", "now", "--app", "a", "--all"}, `bulk retry: unexpected argument "now"`},
		{[]string{"retry", "--all"}, "bulk retry: --app is required"},
		{[]string{"retry", "--app", "a", "--state", "scheduled", "--all"}, `bulk retry: --state: want dead or expired, got "scheduled"`},
		{[]string{"cancel", "--app", "a", "--state", "dead", "--all"}, `bulk cancel: --state: want scheduled, got "dead"`},
		{[]string{"retry", "--app", "a", "--due-after", "yesterday"}, `bulk retry: --due-after: want an RFC 3339 time`},
		{[]string{"cancel", "--app", "a", "--due-before", "2026-03-01"}, `bulk cancel: --due-before: want an RFC 3339 time`},
		{[]string{"retry", "--app", "a", "--due-after", "2026-03-01T10:00:00Z", "--due-before", "2026-03-01T10:00:00Z"}, "bulk retry: --due-before must be after --due-after"},
		{[]string{"retry", "--app", "a", "--all", "--limit", "-1"}, "bulk retry: --limit must be between 1 and 100000"},
		{[]string{"retry", "--app", "a", "--all", "--limit", "100001"}, "bulk retry: --limit must be between 1 and 100000"},
		{[]string{"retry", "--app", "billing"}, "bulk retry: this would change every dead task of app billing: narrow it with --key-prefix, --due-after or --due-before, or confirm with --all"},
		{[]string{"cancel", "--app", "shop"}, "bulk cancel: this would change every scheduled task of app shop"},
		{[]string{"retry", "--app", "a", "--all", "--id", "x"}, "bulk: flag provided but not defined: -id"},
	} {
		_, _, err := runCLI(t, serverEnv(a), append([]string{"bulk"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}
