package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
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

// keyHooks is a webhook receiver that counts deliveries by Toc-Key and
// records the Toc-Task-Id of each key's first: the occurrences of
// schedules, whose keys are their due times.
type keyHooks struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int    // Toc-Key → deliveries
	id    map[string]string // Toc-Key → Toc-Task-Id
}

func newKeyHooks(t *testing.T) *keyHooks {
	h := &keyHooks{count: map[string]int{}, id: map[string]string{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key, id := r.Header.Get("Toc-Key"), r.Header.Get("Toc-Task-Id")
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.count[key]++; h.count[key] == 1 {
			h.id[key] = id
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// of returns the keys delivered with prefix (a schedule's key and "@"),
// and their deliveries.
func (h *keyHooks) of(prefix string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, n := range h.count {
		if strings.HasPrefix(k, prefix) {
			out[k] = n
		}
	}
	return out
}

// TestMoveEmbeddedToCluster moves an embedded server's tasks (in every
// state) and recurring schedules (interval and cron, each with a pending
// occurrence) to a PostgreSQL + Redis cluster node as the README says:
// stop the embedded server, export its store, import into the cluster.
// Every task and schedule arrives with its id (an embedded server's ids
// name shard 0, most keys another shard of the cluster); get, patch,
// cancel, retry, claim, ack, nack and batch ack by the original ids work;
// deliveries after the move carry the original ids; nothing fires twice;
// the schedules go on firing on the cluster; a second import imports
// nothing (issue 23).
func TestMoveEmbeddedToCluster(t *testing.T) {
	env := newClusterEnv(t) // skips (or fails in CI) without PostgreSQL and Redis
	ctx := ctxTimeout(t, 2*time.Minute)
	h := newHooks(t)
	occ := newKeyHooks(t)
	var failOn atomic.Bool
	failOn.Store(true)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failOn.Load() {
			w.WriteHeader(500)
			return
		}
		h.Config.Handler.ServeHTTP(w, r) // once moved, it answers as h
	}))
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
	var later, due, delivered, dead, pulls []task.ID
	for i := range 10 {
		later = append(later, schedule(client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("later-%d", i), Delay: task.Duration(time.Hour),
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Target: push}))
		due = append(due, schedule(client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("soon-%d", i), DueAt: &soon, Target: push}))
	}
	for range 3 { // keyless: they stay in the shard their id names (0)
		later = append(later, schedule(client.ScheduleRequest{App: "archive", Delay: task.Duration(2 * time.Hour), PayloadBase64: []byte{0xff, 0},
			Target: task.Target{Pull: &task.PullTarget{}}}))
	}
	for i := range 6 {
		pulls = append(pulls, schedule(client.ScheduleRequest{App: "jobs", Key: fmt.Sprintf("job-%d", i), Delay: task.Duration(2 * time.Hour),
			PayloadBase64: []byte{0xff, 0}, Target: task.Target{Pull: &task.PullTarget{}}}))
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
	// Schedules: an interval and a cron one that fire while the test runs,
	// a yearly one whose pending occurrence waits, a paused one.
	occTarget := task.Target{HTTP: &task.HTTPTarget{URL: occ.URL}}
	var scheds []*task.Schedule
	for _, r := range []client.CreateScheduleRequest{
		{App: "shop", Key: "tick", Every: task.Duration(2 * time.Second), Target: occTarget},
		{App: "shop", Key: "cron3", Cron: "*/3 * * * * *", Timezone: "Europe/Berlin", Target: occTarget},
		{App: "shop", Key: "yearly", Cron: "0 9 1 1 *", Target: occTarget},
		{App: "billing", Key: "paused", Every: task.Duration(time.Hour), Target: occTarget},
	} {
		sc, _, err := ec.CreateSchedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, sc)
	}
	if _, err := ec.PauseSchedule(ctx, scheds[3].ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the delivered and dead tasks, and occurrences on the embedded server", func() bool {
		for _, id := range append(slices.Clone(delivered), dead...) {
			tk, err := ec.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !tk.State.Final() {
				return false
			}
		}
		return len(occ.of("tick@")) > 0 && len(occ.of("cron3@")) > 0
	})
	all := slices.Concat(later, due, pulls, delivered, dead, []task.ID{cancelled})

	// A live export over the API, then the move: stop the server, export
	// its store, import into the cluster.
	live := filepath.Join(root, "live.ndjson")
	runToFile(t, live, "export", "--server", emb.url)
	if err, _ := emb.terminate(t); err != nil {
		t.Fatalf("toc serve: %v", err)
	}
	if time.Now().After(soon) {
		t.Fatal("the embedded server ran until the soon tasks were due; the test cannot tell who fired them")
	}
	file := filepath.Join(root, "tasks.ndjson")
	out := runToFile(t, file, "export", "--data", data)
	exported, exportedScheds := readExport(t, file)
	if want := fmt.Sprintf("exported %d tasks and %d schedules\n", len(exported), len(scheds)); out != want {
		t.Errorf("toc export --data: %q, want %q", out, want)
	}
	for _, id := range all {
		if exported[id] == nil {
			t.Fatalf("task %s is not in the export", id)
		}
	}
	liveTasks, _ := readExport(t, live)
	for id, tk := range liveTasks {
		if tk.ScheduleID.IsZero() { // occurrences fired meanwhile
			if diff := diffTasks(map[task.ID]*task.Task{id: tk}, map[task.ID]*task.Task{id: exported[id]}); diff != "" {
				t.Errorf("the live export and the store's differ: %s", diff)
			}
		}
	}
	deliveredBefore := map[string]int{}
	for k, n := range occ.of("") {
		deliveredBefore[k] = n
	}

	cl := startChild(t, t.TempDir(), env.flags()...)
	cc := cl.client()
	impOut, err := runChild(t, "import", "--server", cl.url, "--from", file)
	if err != nil {
		t.Fatalf("toc import: %v\n%s", err, impOut)
	}
	if want := fmt.Sprintf("imported %d, existing 0, released 0, taken 0; schedules imported %d, existing 0, taken 0\n", len(exported), len(scheds)); impOut != want {
		t.Fatalf("toc import: %q, want %q", impOut, want)
	}
	failOn.Store(false)

	// Every task and schedule is there under its id, as it was.
	moved := 0
	for id, want := range exported {
		got, err := cc.Get(ctx, id)
		if err != nil {
			t.Fatalf("GET %s (original id) on the cluster: %v", id, err)
		}
		if got.ID != id || got.State != want.State || got.App != want.App || got.Key != want.Key || got.Attempts != want.Attempts ||
			got.ScheduleID != want.ScheduleID || !bytes.Equal(got.Payload, want.Payload) || !got.DueAt.Equal(want.DueAt) {
			// Came due meanwhile: an occurrence due on the minute may be
			// under way (delivering), retried or finished by now.
			cameDue := got.ID == id && want.State == task.Scheduled && !want.DueAt.After(time.Now()) &&
				(got.State != task.Scheduled || got.Attempts > want.Attempts)
			if !cameDue {
				t.Errorf("task %s on the cluster: %+v\nexported: %+v", id, got, want)
			}
		}
		if want.Key != "" {
			if byKey, err := cc.GetByKey(ctx, want.App, want.Key); err != nil || byKey.ID != id {
				t.Errorf("GET by key %s: %v, %v", want.Key, byKey, err)
			}
			moved++
		}
	}
	for _, sc := range scheds {
		got, err := cc.GetSchedule(ctx, sc.ID)
		if err != nil || got.ID != sc.ID || got.Key != sc.Key || got.Cron != sc.Cron || got.Every != sc.Every || got.State != exportedScheds[sc.ID].State {
			t.Errorf("schedule %s (%s) on the cluster: %+v, %v", sc.ID, sc.Key, got, err)
		}
	}
	yearly := exportedScheds[scheds[2].ID]
	if p, err := cc.GetByKey(ctx, "shop", task.OccurrenceKey("yearly", *yearly.NextAt)); err != nil || exported[p.ID] == nil || p.ScheduleID != yearly.ID {
		t.Errorf("the yearly schedule's pending occurrence on the cluster: %v, %v (want the imported one)", p, err)
	}

	// A re-import imports nothing.
	if again, err := runChild(t, "import", "--server", cl.url, "--from", file); err != nil ||
		again != fmt.Sprintf("imported 0, existing %d, released 0, taken 0; schedules imported 0, existing %d, taken 0\n", len(exported), len(scheds)) {
		t.Errorf("toc import again: %v\n%s", err, again)
	}

	// The routes that take an id work with the original ids.
	if err := cc.Cancel(ctx, later[0]); err != nil {
		t.Errorf("cancel %s: %v", later[0], err)
	}
	soonAgain := time.Now().Add(time.Second)
	if tk, err := cc.Patch(ctx, later[1], client.PatchRequest{DueAt: &soonAgain}); err != nil || tk.ID != later[1] {
		t.Errorf("patch %s: %v, %v", later[1], tk, err)
	}
	for _, id := range dead {
		if tk, err := cc.Retry(ctx, id); err != nil || tk.ID != id {
			t.Errorf("retry %s: %v, %v", id, tk, err)
		}
	}
	now := time.Now()
	for _, id := range pulls {
		if _, err := cc.Patch(ctx, id, client.PatchRequest{DueAt: &now}); err != nil {
			t.Errorf("patch %s: %v", id, err)
		}
	}
	var claimed []*task.Task
	testkit.WaitFor(t, 10*time.Second, "the pull tasks to be claimable", func() bool {
		got, err := cc.Claim(ctx, "jobs", client.ClaimRequest{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, got...)
		return len(claimed) == len(pulls)
	})
	byID := map[task.ID]*task.Task{}
	for _, tk := range claimed {
		byID[tk.ID] = tk
	}
	for _, id := range pulls {
		if byID[id] == nil {
			t.Fatalf("claimed %d tasks, not %s (original id)", len(claimed), id)
		}
	}
	if err := cc.Ack(ctx, pulls[0], byID[pulls[0]].Lease); err != nil {
		t.Errorf("ack %s: %v", pulls[0], err)
	}
	if err := cc.Nack(ctx, pulls[1], client.NackRequest{Lease: byID[pulls[1]].Lease, Error: "later"}); err != nil {
		t.Errorf("nack %s: %v", pulls[1], err)
	}
	var acks []client.AckItem
	for _, id := range pulls[2:] {
		acks = append(acks, client.AckItem{ID: id, Lease: byID[id].Lease})
	}
	if errs, err := cc.AckMany(ctx, "jobs", acks); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Errorf("batch ack: %v, %v", errs, err)
	}
	for id, want := range map[task.ID]task.State{later[0]: task.Cancelled, pulls[0]: task.Delivered, pulls[1]: task.Scheduled, pulls[2]: task.Delivered} {
		if got, err := cc.Get(ctx, id); err != nil || got.ID != id || got.State != want {
			t.Errorf("task %s after its route: %v, %v; want %s", id, got, err, want)
		}
	}

	// Deliveries after the move carry the original ids: the tasks due
	// during the move, the patched one, the retried ones.
	pushed := slices.Concat(due, []task.ID{later[1]}, dead)
	testkit.WaitFor(t, 30*time.Second, "the moved tasks to fire on the cluster under their ids", func() bool {
		for _, id := range pushed {
			if !h.seen(id.String()) {
				return false
			}
		}
		return true
	})
	// The schedules go on firing on the cluster: two occurrences of each
	// after the move.
	testkit.WaitFor(t, 20*time.Second, "the schedules to fire on the cluster", func() bool {
		for _, key := range []string{"tick@", "cron3@"} {
			after := 0
			for k := range occ.of(key) {
				if deliveredBefore[k] == 0 {
					after++
				}
			}
			if after < 2 {
				return false
			}
		}
		return true
	})
	// Nothing fires twice: no task id, no occurrence (key) twice.
	h.mu.Lock()
	for _, id := range slices.Concat(due, delivered, []task.ID{later[1]}) {
		if n := h.count[id.String()]; n != 1 {
			t.Errorf("task %s delivered %d times", id, n)
		}
	}
	for _, id := range dead { // once to the failing receiver, before: not counted
		if n := h.count[id.String()]; n != 1 {
			t.Errorf("retried task %s delivered %d times after the move", id, n)
		}
	}
	if len(h.bad) > 0 {
		t.Errorf("bad deliveries: %v", h.bad)
	}
	h.mu.Unlock()
	for k, n := range occ.of("") {
		if n != 1 {
			t.Errorf("occurrence %s delivered %d times", k, n)
		}
		if strings.HasPrefix(k, "yearly@") {
			t.Errorf("the yearly schedule's occurrence %s fired", k)
		}
	}
	// Occurrences delivered on the cluster carry the ids the cluster shows.
	occ.mu.Lock()
	ids := maps.Clone(occ.id)
	occ.mu.Unlock()
	for k, id := range ids {
		app := "shop"
		if tk, err := cc.GetByKey(ctx, app, k); err == nil && tk.ID.String() != id {
			t.Errorf("occurrence %s delivered as %s, stored as %s", k, id, tk.ID)
		}
	}
	t.Logf("moved %d tasks (%d keyed) and %d schedules; %d occurrences delivered in all", len(exported), moved, len(scheds), len(ids))
}

// readExport reads an export: its tasks and its schedules.
func readExport(t *testing.T, path string) (map[task.ID]*task.Task, map[task.ID]*task.Schedule) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tasks, scheds := map[task.ID]*task.Task{}, map[task.ID]*task.Schedule{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ln struct {
			Schedule *task.Schedule `json:"schedule"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		if ln.Schedule != nil {
			scheds[ln.Schedule.ID] = ln.Schedule
			continue
		}
		var tk task.Task
		if err := json.Unmarshal(sc.Bytes(), &tk); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		tasks[tk.ID] = &tk
	}
	return tasks, scheds
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
