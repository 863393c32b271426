package e2e_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a new user meets first: GET / leads to the dashboard, `toc version`
// names the build, and `toc backup --to` makes the folders it needs.
func TestFirstHour(t *testing.T) {
	c := startChild(t, t.TempDir())

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(c.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %s Location %q, want 302 to /ui/", res.Status, res.Header.Get("Location"))
	}

	out, err := runChild(t, "version")
	if err != nil || !strings.HasPrefix(out, "toc ") || !strings.Contains(out, " go1.") {
		t.Errorf("toc version: %v, printed %q", err, out)
	}
	to := filepath.Join(t.TempDir(), "backups", "2026-11-26", "toc")
	if out, err := runChild(t, "backup", "--server", c.url, "--to", to); err != nil {
		t.Fatalf("toc backup --to %s (parents missing): %v\n%s", to, err, out)
	}
	if _, err := os.Stat(to); err != nil {
		t.Errorf("backup not at %s: %v", to, err)
	}
}
