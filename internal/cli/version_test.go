package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"released", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, true, "toc v1.2.3 go1.26.8"},
		{"from a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "5aeff76c0ffee0123456789"}, {Key: "vcs.time", Value: "2026-11-24T03:36:34Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true, "toc (devel) revision 5aeff76c0ffe+dirty (2026-11-24T03:36:34Z) go1.26.8"},
		{"no build info", nil, false, "toc (no build information: built without module support)"},
	}
	for _, tt := range tests {
		if got := versionLine(tt.bi, tt.ok); got != tt.want {
			t.Errorf("%s: versionLine = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		stdout, stderr, err := runCLI(t, nil, args...)
		if err != nil || stderr != "" {
			t.Fatalf("toc %v: err %v, stderr %q", args, err, stderr)
		}
		if !strings.HasPrefix(stdout, "toc ") || !strings.Contains(stdout, "go1.") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("toc %v printed %q, want one line naming toc's version and Go's", args, stdout)
		}
	}
	if _, _, err := runCLI(t, nil, "version", "extra"); err == nil {
		t.Error("toc version extra: no error, want a usage error")
	}
}
