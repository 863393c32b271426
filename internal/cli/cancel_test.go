package cli

import (
	"testing"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		pattern    string
		wantStderr string
	}{
		{"by id", []string{id1.String()}, "DELETE /v1/tasks/{id}", "cancelled " + id1.String() + "\n"},
		{"by key", []string{"--app", "billing", "--key", "a/b c"}, "DELETE /v1/apps/{app}/keys/{key}", "cancelled app billing key \"a/b c\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, map[string]func(request) answer{tt.pattern: fixed(204, "")})
			stdout, stderr, err := runCLI(t, serverEnv(a), append([]string{"cancel"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			r := a.only(t)
			if r.Pattern != tt.pattern {
				t.Errorf("request matched %s, want %s", r.Pattern, tt.pattern)
			}
			if tt.pattern == "DELETE /v1/apps/{app}/keys/{key}" && (r.Vars["app"] != "billing" || r.Vars["key"] != "a/b c") {
				t.Errorf("path values = %v", r.Vars)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestCancelConflict(t *testing.T) {
	t.Parallel()
	tk := sampleTask()
	tk.State = task.Delivered
	a := newAPI(t, map[string]func(request) answer{
		"DELETE /v1/tasks/{id}": fixed(409, `{"error":{"code":"conflict","message":"task is delivered"},"task":`+jsonOf(t, tk)+`}`),
	})
	_, stderr, err := runCLI(t, serverEnv(a), "cancel", id1.String())
	if !client.IsConflict(err) {
		t.Fatalf("err = %v, want a conflict", err)
	}
	if want := "toc: task is delivered (HTTP 409, conflict, task " + id1.String() + " is delivered)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if stderr != "" {
		t.Errorf("stderr = %q", stderr)
	}
}
