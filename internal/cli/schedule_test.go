package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		status     int
		wantBody   string
		wantStderr string
	}{
		{
			name: "every flag",
			args: []string{
				"--app", "billing", "--key", "order 42/a", "--at", "2026-03-01T12:00:00Z",
				"--url", "https://example.com/hook", "--header", "X-Tenant: 7", "--header", "Authorization:Bearer x",
				"--payload", `{"order": 42}`, "--deadline", "2026-03-01T13:00:00+01:00", "--max-attempts", "5",
			},
			status: 201,
			wantBody: `{
				"app": "billing", "key": "order 42/a",
				"due_at": "2026-03-01T12:00:00Z", "deadline": "2026-03-01T13:00:00+01:00",
				"payload": {"order": 42},
				"target": {"http": {"url": "https://example.com/hook", "headers": {"X-Tenant": "7", "Authorization": "Bearer x"}}},
				"retry": {"max_attempts": 5}
			}`,
			wantStderr: "created\n",
		},
		{
			name:       "pull in a delay, existing",
			args:       []string{"--app", "billing", "--key", "k", "--in", "90s", "--pull"},
			status:     200,
			wantBody:   `{"app": "billing", "key": "k", "delay": "1m30s", "target": {"pull": {}}}`,
			wantStderr: "exists\n",
		},
		{
			name:       "text payload",
			args:       []string{"--app", "a", "--in", "1h", "--pull", "--payload", `"hello"`},
			status:     201,
			wantBody:   `{"app": "a", "delay": "1h0m0s", "target": {"pull": {}}, "payload": "hello"}`,
			wantStderr: "created\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := sampleTask()
			a := newAPI(t, map[string]func(request) answer{"POST /v1/tasks": fixed(tt.status, jsonOf(t, want))})
			stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"schedule"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkJSON(t, tt.wantBody, a.only(t).Body)
			checkPrintedTask(t, stdout, want)
			if stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.wantStderr)
			}
		})
	}
}

// TestScheduleInZero checks that --in 0s asks for now, since a zero delay
// is left out of the request.
func TestScheduleInZero(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{"POST /v1/tasks": fixed(201, jsonOf(t, sampleTask()))})
	before := time.Now().Add(-time.Second)
	if _, _, err := runCLI(t, serverEnv(a), "schedule", "--app", "a", "--in", "0s", "--pull"); err != nil {
		t.Fatal(err)
	}
	var body struct {
		DueAt *time.Time      `json:"due_at"`
		Delay json.RawMessage `json:"delay"`
	}
	if err := json.Unmarshal([]byte(a.only(t).Body), &body); err != nil {
		t.Fatal(err)
	}
	if body.DueAt == nil || body.DueAt.Before(before) || body.DueAt.After(time.Now()) || body.Delay != nil {
		t.Errorf("due_at = %v, delay = %s; want due_at now and no delay", body.DueAt, body.Delay)
	}
}

func TestScheduleUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil) // must get no request
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--in", "1m", "--pull"}, "schedule: --app is required"},
		{[]string{"--app", "a", "--pull"}, "schedule: --in or --at is required"},
		{[]string{"--app", "a", "--in", "1m", "--at", "2026-03-01T12:00:00Z", "--pull"}, "schedule: give --in or --at, not both"},
		{[]string{"--app", "a", "--in", "-1m", "--pull"}, "schedule: --in must not be negative"},
		{[]string{"--app", "a", "--in", "soon", "--pull"}, `schedule: invalid value "soon" for flag -in`},
		{[]string{"--app", "a", "--at", "tomorrow", "--pull"}, `schedule: --at: want an RFC 3339 time like 2026-03-01T12:00:00Z, got "tomorrow"`},
		{[]string{"--app", "a", "--at", "2026-03-01 12:00", "--pull"}, "schedule: --at: want an RFC 3339 time"},
		{[]string{"--app", "a", "--in", "1m"}, "schedule: --url or --pull is required"},
		{[]string{"--app", "a", "--in", "1m", "--url", "https://x", "--pull"}, "schedule: give --url or --pull, not both"},
		{[]string{"--app", "a", "--in", "1m", "--url", ""}, "schedule: --url must not be empty"},
		{[]string{"--app", "a", "--in", "1m", "--pull", "--header", "X: y"}, "schedule: --header needs --url"},
		{[]string{"--app", "a", "--in", "1m", "--url", "https://x", "--header", "no colon"}, `schedule: invalid value "no colon" for flag -header: want 'Name: value'`},
		{[]string{"--app", "a", "--in", "1m", "--url", "https://x", "--header", ": v"}, `for flag -header: want 'Name: value'`},
		{[]string{"--app", "a", "--in", "1m", "--pull", "--payload", "hello"}, `schedule: --payload must be a JSON value`},
		{[]string{"--app", "a", "--in", "1m", "--pull", "--payload", ""}, `schedule: --payload must be a JSON value`},
		{[]string{"--app", "a", "--in", "1m", "--pull", "--deadline", "1h"}, `schedule: --deadline: want an RFC 3339 time`},
		{[]string{"--app", "a", "--in", "1m", "--pull", "--max-attempts", "-2"}, "schedule: --max-attempts must not be negative, got -2"},
		{[]string{"--app", "a", "--in", "1m", "--pull", "extra"}, `schedule: unexpected argument "extra"`},
	}
	for _, tt := range tests {
		stdout, _, err := runCLI(t, serverEnv(a), append([]string{"schedule"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
		if stdout != "" {
			t.Errorf("%q: stdout = %q", tt.args, stdout)
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}

func TestScheduleServerRefuses(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{
		"POST /v1/tasks": fixed(400, `{"error":{"code":"invalid_argument","message":"must match [a-z0-9][a-z0-9._-]{0,63}, got \"Bad\"","field":"app"}}`),
	})
	stdout, stderr, err := runCLI(t, serverEnv(a), "schedule", "--app", "Bad", "--in", "1m", "--pull")
	if err == nil || !strings.Contains(err.Error(), `app: must match`) || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("err = %v, want the server's 400 naming the field", err)
	}
	if stdout != "" || stderr != "" {
		t.Errorf("stdout %q, stderr %q; want nothing", stdout, stderr)
	}
}
