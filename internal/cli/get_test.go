package cli

import (
	"testing"

	"github.com/toc-dev/toc/client"
)

func TestGet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		pattern string
		vars    map[string]string
	}{
		{"by id", []string{id1.String()}, "GET /v1/tasks/{id}", map[string]string{"id": id1.String()}},
		{"by id, lower case", []string{"01jd8x5c2m0000abcdefghjkmn"}, "GET /v1/tasks/{id}", map[string]string{"id": id1.String()}},
		{"by key", []string{"--app", "billing", "--key", "order 42/ü"}, "GET /v1/apps/{app}/keys/{key}", map[string]string{"app": "billing", "key": "order 42/ü"}},
		{"by key, dot dot", []string{"--app", "billing", "--key", ".."}, "GET /v1/apps/{app}/keys/{key}", map[string]string{"app": "billing", "key": ".."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := sampleTask()
			a := newAPI(t, map[string]func(request) answer{tt.pattern: fixed(200, jsonOf(t, want))})
			stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"get"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			r := a.only(t)
			if r.Pattern != tt.pattern || len(r.Vars) != len(tt.vars) || r.Vars["id"] != tt.vars["id"] || r.Vars["key"] != tt.vars["key"] {
				t.Errorf("request %s %v, want %s %v", r.Pattern, r.Vars, tt.pattern, tt.vars)
			}
			checkPrintedTask(t, stdout, want)
			if stderr != "" {
				t.Errorf("stderr = %q", stderr)
			}
		})
	}
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{
		"GET /v1/apps/{app}/keys/{key}": fixed(404, `{"error":{"code":"not_found","message":"toc: task not found"}}`),
	})
	stdout, _, err := runCLI(t, serverEnv(a), "get", "--app", "a", "--key", "k")
	if !client.IsNotFound(err) {
		t.Errorf("err = %v, want not found", err)
	}
	if stdout != "" {
		t.Errorf("stdout = %q", stdout)
	}
}

// TestRefUsageErrors covers get's arguments, which cancel shares.
func TestRefUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "give a task ID, or --app and --key"},
		{[]string{"nope"}, `"nope" is not a task ID`},
		{[]string{id1.String(), id1.String()}, "want one task ID, got 2 arguments"},
		{[]string{"--app", "a", id1.String()}, "give a task ID or --app and --key, not both"},
		{[]string{"--key", "k"}, "--app is required with --key"},
		{[]string{"--app", "a"}, "--key is required with --app"},
	}
	for _, cmd := range []string{"get", "cancel"} {
		for _, tt := range tests {
			_, _, err := runCLI(t, serverEnv(a), append([]string{cmd}, tt.args...)...)
			checkUsageError(t, err, cmd+": "+tt.want)
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}
