package cli

import (
	"errors"
	"testing"
)

func TestClock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, pattern, answer, wantBody, wantStdout string
		args                                        []string
	}{
		{"show", "GET /v1/admin/clock", `{"now":"2027-03-14T09:00:00Z","test_clock":true}`, "",
			"2027-03-14T09:00:00Z (test clock)\n", nil},
		{"advance", "POST /v1/admin/clock", `{"now":"2027-03-14T09:30:00Z","test_clock":true,"fired":2}`, `{"advance":"30m0s"}`,
			"2027-03-14T09:30:00Z fired 2\n", []string{"advance", "30m"}},
		{"advance to", "POST /v1/admin/clock", `{"now":"2027-03-15T00:00:00Z","test_clock":true,"fired":0}`, `{"to":"2027-03-15T00:00:00Z"}`,
			"2027-03-15T00:00:00Z fired 0\n", []string{"advance", "--to", "2027-03-15T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, map[string]func(request) answer{tt.pattern: fixed(200, tt.answer)})
			stdout, _, err := runCLI(t, serverEnv(a), append([]string{"clock"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			r := a.only(t)
			if r.Pattern != tt.pattern || r.Body != tt.wantBody {
				t.Errorf("request %s %q, want %s %q", r.Pattern, r.Body, tt.pattern, tt.wantBody)
			}
			if stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout, tt.wantStdout)
			}
		})
	}
}

func TestClockUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"advance"}, {"advance", "-5m"}, {"advance", "soon"}, {"back", "1m"}, {"advance", "--to", "tomorrow"}} {
		a := newAPI(t, nil)
		if _, _, err := runCLI(t, serverEnv(a), append([]string{"clock"}, args...)...); !errors.Is(err, ErrUsage) {
			t.Errorf("clock %q: err = %v, want a usage error", args, err)
		}
	}
}
