package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// exportServer answers GET /v1/admin/export with body and the count
// trailer (none when count is ""), and records the query.
func exportAPI(t *testing.T, body, count string) (*httptest.Server, *string) {
	t.Helper()
	q := new(string)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/admin/export" {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
		}
		*q = r.URL.RawQuery
		w.Header().Set("Content-Type", "application/x-ndjson")
		if count != "" {
			w.Header().Set("Trailer", "Toc-Export-Count")
		}
		w.WriteHeader(200)
		w.Write([]byte(body))
		if count != "" {
			w.Header().Set("Toc-Export-Count", count)
		}
	}))
	t.Cleanup(s.Close)
	return s, q
}

func TestExport(t *testing.T) {
	t.Parallel()
	body := `{"id":"01JD8X5C2M0000ABCDEFGHJKMN","app":"shop"}` + "\n" + `{"id":"01JD8X5C2M0000ABCDEFGHJKMP","app":"shop"}` + "\n" +
		`{"schedule":{"id":"01JD8X5C2M0000ABCDEFGHJKMQ","app":"shop"}}` + "\n"
	s, q := exportAPI(t, body, "3")
	stdout, stderr, err := runCLI(t, map[string]string{EnvServer: s.URL}, "export", "--app", "shop")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != body || stderr != "exported 2 tasks and 1 schedules\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if *q != "app=shop" {
		t.Errorf("query %q", *q)
	}

	// A count that does not match what arrived, or none.
	s, _ = exportAPI(t, body, "4")
	if _, _, err := runCLI(t, map[string]string{EnvServer: s.URL}, "export"); err == nil || !strings.Contains(err.Error(), "the server sent 4 lines, 3 arrived") {
		t.Errorf("short export: %v", err)
	}
	s, _ = exportAPI(t, body, "")
	if _, stderr, err := runCLI(t, map[string]string{EnvServer: s.URL}, "export"); err != nil || !strings.Contains(stderr, "carried no count") {
		t.Errorf("export without a count: %v, %q", err, stderr)
	}
}

func TestExportUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "sleeping"}, `export: --state: want one of`},
		{[]string{"--app", "Bad App"}, `export: --app: app: must match`},
		{[]string{"--data", "x", "--server", "http://127.0.0.1:1"}, "export: give --server or --data, not both"},
		{[]string{"now"}, `export: unexpected argument "now"`},
	} {
		_, _, err := runCLI(t, nil, append([]string{"export"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
	}
	stdout, _, err := runCLI(t, nil, "help", "export")
	if err != nil || !strings.HasPrefix(stdout, "usage: toc export ") {
		t.Errorf("help export: %v\n%s", err, stdout)
	}
}

// TestExportData exports a store no server runs on.
func TestExportData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := pebblestore.Open(pebblestore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var gen task.IDGenerator
	now := time.Now().UTC().Truncate(time.Millisecond)
	var want []*task.Task
	for _, app := range []string{"b-app", "a-app"} {
		tk := &task.Task{ID: gen.New(now, 0), App: app, Key: "k", DueAt: now, NextAttemptAt: now, WakeAt: now, State: task.Scheduled,
			Target: task.Target{Pull: &task.PullTarget{}}, Retry: task.RetryPolicy{}.WithDefaults(), CreatedAt: now, UpdatedAt: now, Payload: []byte(`{"a":1}`)}
		if _, err := st.Create(ctx, []*task.Task{tk}); err != nil {
			t.Fatal(err)
		}
		want = append([]*task.Task{tk}, want...) // apps in name order
	}
	sched := &task.Schedule{ID: gen.New(now, 0), App: "a-app", Key: "tick", Every: task.Duration(time.Minute), Timezone: "UTC",
		CatchUp: task.CatchUpOne, State: task.ScheduleActive, NextAt: &now, CreatedAt: now, UpdatedAt: now, Anchor: now, WakeAt: now,
		Target: task.Target{Pull: &task.PullTarget{}}, Retry: task.RetryPolicy{}.WithDefaults()}
	if _, _, err := st.CreateSchedule(ctx, sched); err != nil {
		t.Fatal(err)
	}
	// While a process has the store open, it is refused.
	if _, _, err := runCLI(t, nil, "export", "--data", dir); err == nil || !strings.Contains(err.Error(), "does a server run on it?") {
		t.Errorf("export of a store in use: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, nil, "export", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 3 || stderr != "exported 2 tasks and 1 schedules\n" {
		t.Fatalf("stdout %q, stderr %q", stdout, stderr)
	}
	for i, l := range lines[:2] {
		b, _ := json.Marshal(want[i])
		if l != string(b) {
			t.Errorf("line %d: %s, want %s", i+1, l, b)
		}
	}
	// The schedule last, in its API form.
	b, _ := json.Marshal(map[string]*task.Schedule{"schedule": sched})
	if lines[2] != string(b) {
		t.Errorf("line 3: %s, want %s", lines[2], b)
	}
	empty := t.TempDir()
	if _, _, err := runCLI(t, nil, "export", "--data", empty); err == nil || !strings.Contains(err.Error(), "holds no toc store") {
		t.Errorf("export of an empty directory: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the empty directory got %v", entries)
	}
}
