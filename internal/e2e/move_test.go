package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// runToFile runs `toc args...` with its stdout in the file at path and
// returns its stderr.
func runToFile(t *testing.T, path string, args ...string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := tocCommand(ctxTimeout(t, 30*time.Second), args...)
	var stderr testsvc.LockedBuffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("toc %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

// readTasks reads an export.
func readTasks(t *testing.T, path string) map[task.ID]*task.Task {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[task.ID]*task.Task{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var tk task.Task
		if err := json.Unmarshal(sc.Bytes(), &tk); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		out[tk.ID] = &tk
	}
	return out
}

// TestMoveEmbeddedToCluster moves an embedded server's tasks (scheduled,
// delivered, dead, cancelled) to a PostgreSQL + Redis cluster node as the
// README says: stop the embedded server, export its store, import into the
// cluster. Every task is there under its original id, nothing fires twice
// (the ones that came due during the move fire once, on the cluster), and a
// second import imports nothing.
func TestMoveEmbeddedToCluster(t *testing.T) {
	env := newClusterEnv(t) // skips (or fails in CI) without PostgreSQL and Redis
	ctx := ctxTimeout(t, 2*time.Minute)
	h := newHooks(t)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	root := t.TempDir()
	data := filepath.Join(root, "data")
	emb := startChild(t, data)
	ec := emb.client()

	push := task.Target{HTTP: &task.HTTPTarget{URL: h.URL}}
	schedule := func(r client.ScheduleRequest) task.ID {
		t.Helper()
		tk, _, err := ec.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return tk.ID
	}
	soon := time.Now().Add(8 * time.Second)
	var later, due, delivered, dead []task.ID
	for i := range 10 {
		later = append(later, schedule(client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("later-%d", i), Delay: task.Duration(time.Hour),
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Target: push}))
		due = append(due, schedule(client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("soon-%d", i), DueAt: &soon, Target: push}))
	}
	for range 5 {
		later = append(later, schedule(client.ScheduleRequest{App: "jobs", Delay: task.Duration(2 * time.Hour), PayloadBase64: []byte{0xff, 0}, Target: task.Target{Pull: &task.PullTarget{}}}))
	}
	for i := range 3 {
		delivered = append(delivered, schedule(client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("now-%d", i), Target: push}))
		dead = append(dead, schedule(client.ScheduleRequest{App: "billing", Key: fmt.Sprintf("refund-%d", i), Retry: &task.RetryPolicy{MaxAttempts: 1},
			Target: task.Target{HTTP: &task.HTTPTarget{URL: failing.URL}}}))
	}
	cancelled := schedule(client.ScheduleRequest{App: "shop", Key: "cancel-me", Delay: task.Duration(time.Hour), Target: push})
	if err := ec.Cancel(ctx, cancelled); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the delivered and dead tasks", func() bool {
		for _, id := range append(slices.Clone(delivered), dead...) {
			tk, err := ec.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !tk.State.Final() {
				return false
			}
		}
		return true
	})
	all := slices.Concat(later, due, delivered, dead, []task.ID{cancelled})

	// A live export over the API, then the move: stop the server, export
	// its store, import into the cluster.
	live := filepath.Join(root, "live.ndjson")
	if out := runToFile(t, live, "export", "--server", emb.url); out != fmt.Sprintf("exported %d tasks\n", len(all)) {
		t.Errorf("toc export --server: %q", out)
	}
	if err, _ := emb.terminate(t); err != nil {
		t.Fatalf("toc serve: %v", err)
	}
	if time.Now().After(soon) {
		t.Fatal("the embedded server ran until the soon tasks were due; the test cannot tell who fired them")
	}
	file := filepath.Join(root, "tasks.ndjson")
	if out := runToFile(t, file, "export", "--data", data); out != fmt.Sprintf("exported %d tasks\n", len(all)) {
		t.Errorf("toc export --data: %q", out)
	}
	exported := readTasks(t, file)
	if diff := diffTasks(readTasks(t, live), exported); diff != "" {
		t.Errorf("the live export and the store's differ: %s", diff)
	}

	cl := startChild(t, t.TempDir(), env.flags()...)
	cc := cl.client()
	out, err := runChild(t, "import", "--server", cl.url, "--from", file)
	if err != nil {
		t.Fatalf("toc import: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], fmt.Sprintf("imported %d, existing 0, released 0, moved ", len(all))) || !strings.HasSuffix(lines[0], ", taken 0") {
		t.Fatalf("toc import: %s", out)
	}
	newID := map[task.ID]task.ID{} // original → as stored in the cluster
	for _, l := range lines[1:] {
		var old, nid task.ID
		if _, err := fmt.Sscanf(l, "moved %s %s", textID{&old}, textID{&nid}); err != nil {
			t.Fatalf("toc import line %q: %v", l, err)
		}
		newID[old] = nid
	}
	t.Logf("%s (%d moved to their key's shard)", lines[0], len(newID))

	// GET by every original id finds the task as it was.
	for _, id := range all {
		got, err := cc.Get(ctx, id)
		if err != nil {
			t.Fatalf("GET %s (original id) on the cluster: %v", id, err)
		}
		want := exported[id]
		if nid, ok := newID[id]; ok {
			if got.ID != nid {
				t.Errorf("GET %s answered %s, want %s", id, got.ID, nid)
			}
		} else if got.ID != id {
			t.Errorf("GET %s answered %s", id, got.ID)
		}
		if got.State != want.State || got.App != want.App || got.Key != want.Key || got.Attempts != want.Attempts ||
			!bytes.Equal(got.Payload, want.Payload) || len(got.History) != len(want.History) || !got.DueAt.Equal(want.DueAt) {
			t.Errorf("task %s on the cluster: %+v\nexported: %+v", id, got, want)
		}
	}

	// A re-import imports nothing.
	if out, err := runChild(t, "import", "--server", cl.url, "--from", file); err != nil || !strings.HasPrefix(out, fmt.Sprintf("imported 0, existing %d,", len(all))) {
		t.Errorf("toc import again: %v\n%s", err, out)
	}

	// The tasks due during the move fire on the cluster, once each; no
	// task fires twice.
	clusterID := func(id task.ID) string {
		if nid, ok := newID[id]; ok {
			return nid.String()
		}
		return id.String()
	}
	waitFor(t, 30*time.Second, "the tasks due during the move to fire on the cluster", func() bool {
		for _, id := range due {
			if !h.seen(clusterID(id)) {
				return false
			}
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	deliveries := func(id task.ID) int { // under the original id and the cluster's
		n := h.count[id.String()]
		if c := clusterID(id); c != id.String() {
			n += h.count[c]
		}
		return n
	}
	for _, id := range due {
		if n := deliveries(id); n != 1 {
			t.Errorf("task %s delivered %d times", id, n)
		}
	}
	for _, id := range delivered {
		if n := deliveries(id); n != 1 {
			t.Errorf("delivered task %s delivered %d times", id, n)
		}
	}
	if len(h.bad) > 0 {
		t.Errorf("bad deliveries: %v", h.bad)
	}
}

// textID scans a task id.
type textID struct{ id *task.ID }

func (x textID) Scan(st fmt.ScanState, verb rune) error {
	tok, err := st.Token(true, nil)
	if err != nil {
		return err
	}
	return x.id.UnmarshalText(tok)
}

func diffTasks(a, b map[task.ID]*task.Task) string {
	var d []string
	for id, ta := range a {
		tb, ok := b[id]
		if !ok {
			d = append(d, id.String()+" only in the first")
			continue
		}
		ja, _ := json.Marshal(ta)
		jb, _ := json.Marshal(tb)
		if !bytes.Equal(ja, jb) {
			d = append(d, fmt.Sprintf("%s: %s vs %s", id, ja, jb))
		}
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			d = append(d, id.String()+" only in the second")
		}
	}
	return strings.Join(d, "; ")
}
