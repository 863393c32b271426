package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// importAPI answers each POST /v1/admin/import with the next answer and
// records the bodies.
func importAPI(t *testing.T, as ...answer) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var bodies []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/admin/import" || r.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("unexpected request %s %s %s", r.Method, r.URL, r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		a := as[min(len(bodies), len(as))-1]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

func writeInput(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tasks.ndjson")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImport(t *testing.T) {
	t.Parallel()
	s, bodies := importAPI(t,
		answer{200, `{"imported":2,"existing":0,"released":1,"moved":[{"id":"01JD8X5C2M0000ABCDEFGHJKMN","new_id":"01JD8X5C2M0003ABCDEFGHJKMN"}],"taken":[]}`},
		answer{200, `{"imported":0,"existing":1,"released":0,"moved":[],"taken":[{"id":"01JD8X5C2M0000ABCDEFGHJKMP","app":"shop","key":"o 1","holder":"01JD8X5C2M0001ABCDEFGHJKMQ"}]}`},
		answer{200, `{"imported":1,"existing":0,"released":0,"moved":[],"taken":[],"schedules_imported":1,"schedules_existing":1,"schedules_taken":[{"id":"01JD8X5C2M0000ABCDEFGHJKMR","app":"shop","key":"tick","holder":"01JD8X5C2M0001ABCDEFGHJKMS"}]}`},
	)
	in := writeInput(t, "{\"n\":1}\n\n{\"n\":2}\r\n{\"n\":3}\n   \n{\"n\":4}\n{\"n\":5}")
	stdout, stderr, err := runCLI(t, map[string]string{EnvServer: s.URL}, "import", "--from", in, "--batch", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := "imported 3, existing 1, released 1, taken 1; schedules imported 1, existing 1, taken 1\n" +
		"taken 01JD8X5C2M0000ABCDEFGHJKMP shop \"o 1\" holder 01JD8X5C2M0001ABCDEFGHJKMQ\n" +
		"taken schedule 01JD8X5C2M0000ABCDEFGHJKMR shop \"tick\" holder 01JD8X5C2M0001ABCDEFGHJKMS\n"
	if stdout != want || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	got := bodies()
	wantBodies := []string{"{\"n\":1}\n{\"n\":2}\n", "{\"n\":3}\n{\"n\":4}\n", "{\"n\":5}\n"}
	if strings.Join(got, "|") != strings.Join(wantBodies, "|") {
		t.Errorf("bodies %q, want %q", got, wantBodies)
	}
}

// TestImportRefused: the server's "line N" of a request becomes the line
// of the input.
func TestImportRefused(t *testing.T) {
	t.Parallel()
	s, bodies := importAPI(t,
		answer{200, `{"imported":2,"existing":0,"released":0,"moved":[],"taken":[]}`},
		answer{400, `{"error":{"code":"invalid_field","message":"line 2 (task 01JD8X5C2M0000ABCDEFGHJKMN): target.http.url: is required","field":"target.http.url"}}`},
	)
	in := writeInput(t, "a\nb\n\nc\nd\ne\n")
	stdout, stderr, err := runCLI(t, map[string]string{EnvServer: s.URL}, "import", "--from", in, "--batch", "2")
	if err == nil || err.Error() != "import: "+in+":5 (task 01JD8X5C2M0000ABCDEFGHJKMN): target.http.url: is required (HTTP 400, invalid_field)" {
		t.Errorf("err = %v", err)
	}
	if stdout != "" || stderr != "import: before this error: imported 2, existing 0, released 0, taken 0; schedules imported 0, existing 0, taken 0\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if n := len(bodies()); n != 2 {
		t.Errorf("%d requests, want 2 (it stops at the refusal)", n)
	}

	_, _, err = runCLI(t, map[string]string{EnvServer: s.URL}, "import", "--batch", "0")
	checkUsageError(t, err, "import: --batch must be between 1 and 1000")
	_, _, err = runCLI(t, map[string]string{EnvServer: s.URL}, "import", "--from", filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing input: %v", err)
	}
	stdout, _, err = runCLI(t, nil, "help", "import")
	if err != nil || !strings.HasPrefix(stdout, "usage: toc import ") {
		t.Errorf("help import: %v\n%s", err, stdout)
	}
}
