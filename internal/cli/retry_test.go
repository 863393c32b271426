package cli

import (
	"testing"
)

func TestRetry(t *testing.T) {
	t.Parallel()
	want := sampleTask()
	a := newAPI(t, map[string]func(request) answer{"POST /v1/tasks/{id}/retry": fixed(200, jsonOf(t, want))})
	stdout, _, err := runCLI(t, serverEnv(a), "retry", id1.String())
	if err != nil {
		t.Fatal(err)
	}
	if r := a.only(t); r.Vars["id"] != id1.String() || r.Body != "" {
		t.Errorf("request %v body %q, want id %s and no body", r.Vars, r.Body, id1)
	}
	checkPrintedTask(t, stdout, want)
}

func TestRetryUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "retry: give a task ID"},
		{[]string{"x"}, `retry: "x" is not a task ID`},
		{[]string{id1.String(), "y"}, "retry: want one task ID, got 2 arguments"},
		{[]string{"--app", "a", id1.String()}, "retry: flag provided but not defined: -app"},
	} {
		_, _, err := runCLI(t, serverEnv(a), append([]string{"retry"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}
