package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

var id2 = mustID("01JD8X5C2M0000ABCDEFGHJKMP")

func sampleSchedule() *task.Schedule {
	next := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	return &task.Schedule{
		ID:        id1,
		App:       "shop",
		Key:       "daily-report",
		Cron:      "0 9 * * MON-FRI",
		Timezone:  "Europe/Berlin",
		CatchUp:   task.CatchUpOne,
		State:     task.ScheduleActive,
		NextAt:    &next,
		CreatedAt: t0,
		UpdatedAt: t0,
		Payload:   []byte(`{"kind":"daily"}`),
		Target:    task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/report"}},
		Retry:     task.RetryPolicy{MaxAttempts: 3},
	}
}

// checkPrintedSchedule checks that out is want, as indented JSON.
func checkPrintedSchedule(t *testing.T, out string, want *task.Schedule) {
	t.Helper()
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(b)+"\n", out); d != "" {
		t.Errorf("stdout mismatch (-want +got):\n%s", d)
	}
}

func TestSchedulesCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		status     int
		wantBody   string
		wantStderr string
	}{
		{
			name: "cron with every flag",
			args: []string{
				"--app", "shop", "--key", "daily report/eu", "--cron", "0 9 * * MON-FRI", "--timezone", "Europe/Berlin",
				"--start-at", "2026-03-01T00:00:00+01:00", "--end-at", "2026-12-31T23:59:59Z", "--catch-up", "all",
				"--url", "https://example.com/report", "--header", "X-Tenant: 7",
				"--payload", `{"kind": "daily"}`, "--deadline-after", "10m", "--max-attempts", "5",
			},
			status: 201,
			wantBody: `{
				"app": "shop", "key": "daily report/eu", "cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin",
				"start_at": "2026-03-01T00:00:00+01:00", "end_at": "2026-12-31T23:59:59Z", "catch_up": "all",
				"target": {"http": {"url": "https://example.com/report", "headers": {"X-Tenant": "7"}}},
				"payload": {"kind": "daily"}, "deadline_after": "10m0s", "retry": {"max_attempts": 5}
			}`,
			wantStderr: "created\n",
		},
		{
			name:       "every, pull, existing",
			args:       []string{"--app", "shop", "--key", "reconcile", "--every", "15m", "--pull", "--catch-up", "skip"},
			status:     200,
			wantBody:   `{"app": "shop", "key": "reconcile", "every": "15m0s", "catch_up": "skip", "target": {"pull": {}}}`,
			wantStderr: "exists\n",
		},
		{
			name:       "the app's default target, flags with =",
			args:       []string{"--app=shop", "--key=k", "--cron=@hourly"},
			status:     201,
			wantBody:   `{"app": "shop", "key": "k", "cron": "@hourly", "target": {}}`,
			wantStderr: "created\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := sampleSchedule()
			a := newAPI(t, map[string]func(request) answer{"POST /v1/schedules": fixed(tt.status, jsonOf(t, want))})
			stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"schedules", "create"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkJSON(t, tt.wantBody, a.only(t).Body)
			checkPrintedSchedule(t, stdout, want)
			if stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestSchedulesGet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		pattern string
		vars    map[string]string
	}{
		{[]string{id1.String()}, "GET /v1/schedules/{id}", map[string]string{"id": id1.String()}},
		{[]string{"--app", "shop", "--key", "daily/../report"}, "GET /v1/apps/{app}/schedules/{key}", map[string]string{"app": "shop", "key": "daily/../report"}},
	} {
		want := sampleSchedule()
		a := newAPI(t, map[string]func(request) answer{tt.pattern: fixed(200, jsonOf(t, want))})
		stdout, _, err := runCLI(t, serverEnv(a), append([]string{"schedules", "get"}, tt.args...)...)
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		r := a.only(t)
		if r.Pattern != tt.pattern || cmp.Diff(tt.vars, r.Vars) != "" {
			t.Errorf("%q: request %s %v, want %s %v", tt.args, r.Pattern, r.Vars, tt.pattern, tt.vars)
		}
		checkPrintedSchedule(t, stdout, want)
	}
}

func TestSchedulesList(t *testing.T) {
	t.Parallel()
	cronS := sampleSchedule()
	last := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	cronS.LastAt = &last
	everyS := sampleSchedule()
	everyS.ID, everyS.Key, everyS.Cron, everyS.Every, everyS.Timezone = id2, "re\tconcile", "", task.Duration(15*time.Minute), "UTC"
	everyS.State, everyS.NextAt = task.SchedulePaused, nil
	pages := func(r request) answer {
		if r.Query.Get("cursor") == "" {
			return answer{200, `{"schedules":[` + jsonOf(t, cronS) + `],"next_cursor":"` + id1.String() + `"}`}
		}
		return answer{200, `{"schedules":[` + jsonOf(t, everyS) + `]}`}
	}
	lines := id1.String() + "\tactive\t0 9 * * MON-FRI\tEurope/Berlin\t2026-03-02T08:00:00Z\t2026-03-01T08:00:00Z\tdaily-report\n"
	lines2 := id2.String() + "\tpaused\tevery 15m0s\tUTC\t-\t-\tre concile\n"

	// One page, and the cursor of the next on stderr.
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/schedules": pages})
	stdout, stderr, err := runCLI(t, serverEnv(a), "schedules", "list", "--app", "shop", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != lines || stderr != "more: --cursor "+id1.String()+"\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if r := a.only(t); r.Vars["app"] != "shop" || r.Query.Get("limit") != "1" {
		t.Errorf("request %v %v", r.Vars, r.Query)
	}

	// --all follows the cursor.
	a = newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/schedules": pages})
	stdout, stderr, err = runCLI(t, serverEnv(a), "schedules", "list", "--app", "shop", "--all")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != lines+lines2 || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if reqs := a.requests(); len(reqs) != 2 || reqs[1].Query.Get("cursor") != id1.String() {
		t.Errorf("requests %+v", reqs)
	}

	// --json --all: every schedule, no cursor.
	a = newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/schedules": pages})
	stdout, _, err = runCLI(t, serverEnv(a), "schedules", "list", "--app", "shop", "--all", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var page client.SchedulesPage
	if err := json.Unmarshal([]byte(stdout), &page); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if len(page.Schedules) != 2 || page.Schedules[1].ID != id2 || page.NextCursor != "" {
		t.Errorf("page %+v", page)
	}
}

func TestSchedulesPauseResume(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"pause", "resume"} {
		want := sampleSchedule()
		pattern := "POST /v1/schedules/{id}/" + action

		// By id: one request.
		a := newAPI(t, map[string]func(request) answer{pattern: fixed(200, jsonOf(t, want))})
		stdout, _, err := runCLI(t, serverEnv(a), "schedules", action, id1.String())
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		if r := a.only(t); r.Pattern != pattern || r.Vars["id"] != id1.String() || r.Body != "" {
			t.Errorf("%s: request %s %v %q", action, r.Pattern, r.Vars, r.Body)
		}
		checkPrintedSchedule(t, stdout, want)

		// By key: the schedule's id first.
		byKey := sampleSchedule()
		byKey.ID = id2
		a = newAPI(t, map[string]func(request) answer{
			"GET /v1/apps/{app}/schedules/{key}": fixed(200, jsonOf(t, byKey)),
			pattern:                              fixed(200, jsonOf(t, want)),
		})
		if _, _, err := runCLI(t, serverEnv(a), "schedules", action, "--app", "shop", "--key", "daily-report"); err != nil {
			t.Fatalf("%s by key: %v", action, err)
		}
		reqs := a.requests()
		if len(reqs) != 2 || reqs[0].Vars["key"] != "daily-report" || reqs[1].Pattern != pattern || reqs[1].Vars["id"] != id2.String() {
			t.Errorf("%s by key: requests %+v", action, reqs)
		}
	}
}

func TestSchedulesResumeEnded(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{
		"POST /v1/schedules/{id}/resume": fixed(409, `{"error":{"code":"conflict","message":"toc: cannot resume schedule `+id1.String()+`: it is ended"}}`),
	})
	stdout, _, err := runCLI(t, serverEnv(a), "schedules", "resume", id1.String())
	if !client.IsConflict(err) || errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v, want the server's conflict", err)
	}
	if stdout != "" {
		t.Errorf("stdout = %q", stdout)
	}
}

func TestSchedulesDelete(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args       []string
		pattern    string
		wantStderr string
	}{
		{[]string{id1.String()}, "DELETE /v1/schedules/{id}", "deleted schedule " + id1.String() + "\n"},
		{[]string{"--app", "shop", "--key", "a/b c"}, "DELETE /v1/apps/{app}/schedules/{key}", "deleted schedule app shop key \"a/b c\"\n"},
	} {
		a := newAPI(t, map[string]func(request) answer{tt.pattern: fixed(204, "")})
		stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"schedules", "delete"}, tt.args...)...)
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		r := a.only(t)
		if r.Pattern != tt.pattern {
			t.Errorf("request matched %s, want %s", r.Pattern, tt.pattern)
		}
		if tt.pattern == "DELETE /v1/apps/{app}/schedules/{key}" && (r.Vars["app"] != "shop" || r.Vars["key"] != "a/b c") {
			t.Errorf("path values = %v", r.Vars)
		}
		if stdout != "" || stderr != tt.wantStderr {
			t.Errorf("stdout %q, stderr %q; want nothing, %q", stdout, stderr, tt.wantStderr)
		}
	}

	a := newAPI(t, map[string]func(request) answer{
		"DELETE /v1/schedules/{id}": fixed(404, `{"error":{"code":"not_found","message":"no such schedule"}}`),
	})
	if _, _, err := runCLI(t, serverEnv(a), "schedules", "delete", id1.String()); !client.IsNotFound(err) {
		t.Errorf("err = %v, want not found", err)
	}
}

func TestSchedulesNext(t *testing.T) {
	t.Parallel()
	times := `{"times":["2027-03-26T09:00:00+01:00","2027-03-29T09:00:00+02:00","2027-03-30T09:00:00.5+02:00"]}`
	want := "2027-03-26T09:00:00+01:00\n2027-03-29T09:00:00+02:00\n2027-03-30T09:00:00.5+02:00\n"

	a := newAPI(t, map[string]func(request) answer{"GET /v1/schedules/{id}/next": fixed(200, times)})
	stdout, _, err := runCLI(t, serverEnv(a), "schedules", "next", id1.String(), "-n", "3")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != want {
		t.Errorf("stdout = %q, want %q", stdout, want)
	}
	if r := a.only(t); r.Vars["id"] != id1.String() || r.Query.Get("n") != "3" {
		t.Errorf("request %v %v", r.Vars, r.Query)
	}

	// By key, with the default n.
	a = newAPI(t, map[string]func(request) answer{
		"GET /v1/apps/{app}/schedules/{key}": fixed(200, jsonOf(t, sampleSchedule())),
		"GET /v1/schedules/{id}/next":        fixed(200, times),
	})
	if _, _, err := runCLI(t, serverEnv(a), "schedules", "next", "--app", "shop", "--key", "daily-report"); err != nil {
		t.Fatal(err)
	}
	if reqs := a.requests(); len(reqs) != 2 || reqs[1].Query.Get("n") != "5" {
		t.Errorf("requests %+v", reqs)
	}
}

func TestSchedulesServerRefuses(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{
		"POST /v1/schedules": fixed(400, `{"error":{"code":"invalid_field","message":"minute: 61 is above 59","field":"cron"}}`),
	})
	stdout, stderr, err := runCLI(t, serverEnv(a), "schedules", "create", "--app", "shop", "--key", "k", "--cron", "61 * * * *")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Field != "cron" || errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v, want the server's 400 naming cron", err)
	}
	if want := "toc: cron: minute: 61 is above 59 (HTTP 400, invalid_field)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if stdout != "" || stderr != "" {
		t.Errorf("stdout %q, stderr %q; want nothing", stdout, stderr)
	}
}

func TestSchedulesUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil) // must get no request
	create := func(args ...string) []string {
		return append([]string{"create", "--app", "shop", "--key", "k"}, args...)
	}
	tests := []struct {
		args []string
		want string
	}{
		{nil, "schedules: give an action: create, get, list, pause, resume, delete or next"},
		{[]string{"update"}, `schedules: unknown action "update": want create, get, list, pause, resume, delete or next`},
		{[]string{"--app", "shop", "list"}, `schedules: give the action first (create, get, list, pause, resume, delete or next), then its flags; got "--app"`},
		{[]string{"create", "--key", "k", "--every", "1m"}, "schedules create: --app is required"},
		{[]string{"create", "--app", "shop", "--every", "1m"}, "schedules create: --key is required"},
		{create(), "schedules create: --cron or --every is required"},
		{create("--cron", "@daily", "--every", "1h"), "schedules create: give --cron or --every, not both"},
		{create("--cron", ""), "schedules create: --cron must not be empty"},
		{create("--every", "500ms"), "schedules create: --every must be at least 1s, got 500ms"},
		{create("--every", "often"), `schedules create: invalid value "often" for flag -every`},
		{create("--every", "1h", "--catch-up", "most"), `schedules create: --catch-up: want skip, one or all, got "most"`},
		{create("--every", "1h", "--start-at", "tomorrow"), `schedules create: --start-at: want an RFC 3339 time`},
		{create("--every", "1h", "--end-at", "2026-03-01"), `schedules create: --end-at: want an RFC 3339 time`},
		{create("--every", "1h", "--start-at", "2026-03-02T00:00:00Z", "--end-at", "2026-03-01T00:00:00Z"), "schedules create: --end-at must not be before --start-at"},
		{create("--every", "1h", "--url", "https://x", "--pull"), "schedules create: give --url or --pull, not both"},
		{create("--every", "1h", "--url", ""), "schedules create: --url must not be empty"},
		{create("--every", "1h", "--pull", "--header", "X: y"), "schedules create: --header needs --url"},
		{create("--every", "1h", "--payload", "hello"), "schedules create: --payload must be a JSON value"},
		{create("--every", "1h", "--deadline-after", "0s"), "schedules create: --deadline-after must be positive, got 0s"},
		{create("--every", "1h", "--max-attempts", "-1"), "schedules create: --max-attempts must not be negative, got -1"},
		{create("--every", "1h", "extra"), `schedules create: unexpected argument "extra"`},
		{[]string{"list"}, "schedules list: --app is required"},
		{[]string{"list", "--app", "shop", "--limit", "-1"}, "schedules list: --limit must not be negative"},
		{[]string{"list", "--app", "shop", "extra"}, `schedules list: unexpected argument "extra"`},
		{[]string{"get"}, "schedules get: give a schedule ID, or --app and --key"},
		{[]string{"get", "nope"}, `schedules get: "nope" is not a schedule ID`},
		{[]string{"pause", "--app", "shop"}, "schedules pause: --key is required with --app"},
		{[]string{"resume", "--key", "k"}, "schedules resume: --app is required with --key"},
		{[]string{"delete", id1.String(), "--app", "shop"}, "schedules delete: give a schedule ID or --app and --key, not both"},
		{[]string{"next", id1.String(), "-n", "0"}, "schedules next: -n must be between 1 and 100, got 0"},
		{[]string{"next", id1.String(), "-n", "101"}, "schedules next: -n must be between 1 and 100, got 101"},
		{[]string{"next", id1.String(), "--bogus"}, "schedules next: flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		stdout, _, err := runCLI(t, serverEnv(a), append([]string{"schedules"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
		if stdout != "" {
			t.Errorf("%q: stdout = %q", tt.args, stdout)
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}

func TestSchedulesHelp(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"create", "get", "list", "pause", "resume", "delete", "next"} {
		stdout, stderr, err := runCLI(t, nil, "schedules", action, "-h")
		if err != nil || stdout != "" || !strings.HasPrefix(stderr, "usage: toc schedules "+action+" ") || !strings.Contains(stderr, "-server URL") {
			t.Errorf("schedules %s -h: err %v, stdout %q, stderr %q; want the action's usage on stderr", action, err, stdout, stderr)
		}
	}
	// The command's help lists the actions.
	stdout, _, err := runCLI(t, nil, "help", "schedules")
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"create", "get", "list", "pause", "resume", "delete", "next"} {
		if !strings.Contains(stdout, "\n  "+action+" ") {
			t.Errorf("help schedules does not list %s:\n%s", action, stdout)
		}
	}
}
