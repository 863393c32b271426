package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// exportAll exports from s and returns the lines, checking the count the
// server sent.
func exportAll(t *testing.T, c *client.Client, opts client.ExportOptions) [][]byte {
	t.Helper()
	s, err := c.Export(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if n, ok := s.Count(); !ok || n != len(lines) {
		t.Fatalf("export count %d (%v), %d lines arrived", n, ok, len(lines))
	}
	return lines
}

func ndjson(lines [][]byte) io.Reader {
	return bytes.NewReader(append(bytes.Join(lines, []byte("\n")), '\n'))
}

func decodeTask(t *testing.T, b []byte) *task.Task {
	t.Helper()
	var tk task.Task
	if err := json.Unmarshal(b, &tk); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return &tk
}

// sameTask compares what an import keeps: everything, the id included.
func sameTask(t *testing.T, want, got *task.Task) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("task %s after the import (-exported +imported):\n%s", want.ID, diff)
	}
}

// TestExportImport exports a server's tasks in every state and imports
// them into another of the same mode: GET by the original id finds each as
// it was, and a re-import imports nothing.
func TestExportImport(t *testing.T) {
	ctx := context.Background()
	ok := testkit.NewReceiver(t)
	failing := testkit.NewReceiver(t)
	failing.SetStatus(500)
	src := startServer(t, "", nil)
	dst := startServer(t, "", nil)

	deadline := time.Now().Add(48 * time.Hour)
	reqs := []client.ScheduleRequest{
		{App: "shop", Key: "order-1", Delay: task.Duration(time.Hour), Payload: []byte(`{"order": 1, "x":"<&>"}`), Target: ok.Target(), Deadline: &deadline},
		{App: "shop", Delay: task.Duration(2 * time.Hour), PayloadBase64: []byte{0, 1, 2, 0xff}, Target: task.Target{Pull: &task.PullTarget{}}},
		{App: "shop", Key: "order-2", Delay: 0, Target: ok.Target()},
		{App: "billing", Key: "refund-1", Delay: 0, Target: failing.Target(), Retry: &task.RetryPolicy{MaxAttempts: 1}},
		{App: "billing", Key: "refund-2", Delay: task.Duration(time.Hour), Target: ok.Target()},
	}
	var ids []task.ID
	for _, r := range reqs {
		tk, _, err := src.client.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	waitState(t, src, ids[2], task.Delivered, 10*time.Second)
	waitState(t, src, ids[3], task.Dead, 10*time.Second)
	if err := src.client.Cancel(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}

	lines := exportAll(t, src.client, client.ExportOptions{})
	if len(lines) != len(ids) {
		t.Fatalf("%d tasks exported, want %d", len(lines), len(ids))
	}
	exported := map[task.ID]*task.Task{}
	for _, l := range lines {
		tk := decodeTask(t, l)
		exported[tk.ID] = tk
		// Each line is the task as GET answers it.
		got, err := src.client.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameTask(t, got, tk)
	}
	if got := exportAll(t, src.client, client.ExportOptions{App: "billing", State: task.Dead}); len(got) != 1 || decodeTask(t, got[0]).ID != ids[3] {
		t.Errorf("export of billing's dead tasks: %s", got)
	}
	if got := exportAll(t, src.client, client.ExportOptions{App: "nobody"}); len(got) != 0 {
		t.Errorf("export of an app without tasks: %s", got)
	}

	res, err := dst.client.Import(ctx, ndjson(lines))
	if err != nil {
		t.Fatal(err)
	}
	if res.Imported != len(ids) || res.Existing != 0 || len(res.Taken) != 0 || res.Released != 0 {
		t.Fatalf("import: %+v", res)
	}
	for _, id := range ids {
		got, err := dst.client.Get(ctx, id)
		if err != nil {
			t.Fatalf("GET %s, the original id, after the import: %v", id, err)
		}
		sameTask(t, exported[id], got)
	}
	// Keys are kept: a create with one answers the imported task.
	tk, created, err := dst.client.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: "order-1", Delay: task.Duration(time.Minute), Target: ok.Target()})
	if err != nil || created || tk.App != "shop" || tk.Payload == nil {
		t.Errorf("create with an imported key: %v, created %v, %+v", err, created, tk)
	}

	// Importing again, or into the source, imports nothing.
	for _, s := range []*server{dst, src} {
		res, err := s.client.Import(ctx, ndjson(lines))
		if err != nil {
			t.Fatal(err)
		}
		if res.Imported != 0 || res.Existing != len(ids) {
			t.Errorf("import again: %+v, want 0 imported, %d existing", res, len(ids))
		}
	}
	// The imported tasks fire on their schedule on the target: the pull
	// task is there to claim once due, moved to now.
	if _, err := dst.client.Patch(ctx, ids[1], client.PatchRequest{Delay: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the imported pull task to be claimable", func() bool {
		got, err := dst.client.Claim(ctx, "shop", client.ClaimRequest{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(got) == 1 && got[0].ID == ids[1] && bytes.Equal(got[0].Payload, []byte{0, 1, 2, 0xff})
	})
}

// importLine is a task line to import, changed by the test.
func importLine(id task.ID, change func(m map[string]any)) []byte {
	now := time.Now().UTC()
	m := map[string]any{
		"id": id.String(), "app": "shop", "key": "k-" + id.String(),
		"due_at": now.Add(time.Hour).Format(time.RFC3339Nano), "next_attempt_at": now.Add(time.Hour).Format(time.RFC3339Nano),
		"target": map[string]any{"http": map[string]any{"url": "http://127.0.0.1:1/hook"}},
		"retry":  map[string]any{"max_attempts": 3}, "state": "scheduled", "attempts": 0,
		"created_at": now.Format(time.RFC3339Nano), "updated_at": now.Format(time.RFC3339Nano),
		"payload_base64": "eyJhIjoxfQ==", "payload": map[string]any{"a": 1},
		"history": []any{map[string]any{"at": now.Format(time.RFC3339Nano), "what": "created"}},
	}
	if change != nil {
		change(m)
	}
	b, _ := json.Marshal(m)
	return b
}

var idGen task.IDGenerator

func newID() task.ID { return idGen.New(time.Now(), 0) }

// TestImportChecks: an import is checked as strictly as a create: a bad
// line refuses the whole request (400 naming the line and the field), and
// only admin tokens may import or export.
func TestImportChecks(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, "", nil)
	admin, shop := withTokens(t, s)
	good := importLine(newID(), nil)

	for _, tt := range []struct {
		name   string
		change func(m map[string]any)
		raw    string
		status int
		field  string
		msg    string
	}{
		{name: "bad id", change: func(m map[string]any) { m["id"] = "nope" }, status: 400, field: "id"},
		{name: "no id", change: func(m map[string]any) { delete(m, "id") }, status: 400, field: "id"},
		{name: "bad app", change: func(m map[string]any) { m["app"] = "Bad App" }, status: 400, field: "app"},
		{name: "empty key", change: func(m map[string]any) { m["key"] = "" }, status: 400, field: "key"},
		{name: "no state", change: func(m map[string]any) { delete(m, "state") }, status: 400, field: "state"},
		{name: "bad state", change: func(m map[string]any) { m["state"] = "sleeping" }, status: 400, field: "state"},
		{name: "bad url", change: func(m map[string]any) { m["target"] = map[string]any{"http": map[string]any{"url": "ftp://x"}} }, status: 400, field: "target.http.url"},
		{name: "no target", change: func(m map[string]any) { delete(m, "target") }, status: 400, field: "target"},
		{name: "bad retry", change: func(m map[string]any) { m["retry"] = map[string]any{"max_attempts": 100000} }, status: 400, field: "retry.max_attempts"},
		{name: "unknown field", change: func(m map[string]any) { m["colour"] = "red" }, status: 400, field: "colour"},
		{name: "bad time", change: func(m map[string]any) { m["due_at"] = "tomorrow" }, status: 400, field: "due_at"},
		{name: "no created_at", change: func(m map[string]any) { delete(m, "created_at") }, status: 400, field: "created_at"},
		{name: "final without finished_at", change: func(m map[string]any) { m["state"] = "delivered" }, status: 400, field: "finished_at"},
		{name: "scheduled with finished_at", change: func(m map[string]any) { m["finished_at"] = time.Now().Format(time.RFC3339) }, status: 400, field: "finished_at"},
		{name: "updated before created", change: func(m map[string]any) {
			m["updated_at"] = "2020-01-01T00:00:00Z"
		}, status: 400, field: "updated_at"},
		{name: "finished before created", change: func(m map[string]any) {
			m["state"], m["finished_at"] = "delivered", "2020-01-01T00:00:00Z"
		}, status: 400, field: "finished_at"},
		{name: "negative attempts", change: func(m map[string]any) { m["attempts"] = -1 }, status: 400, field: "attempts"},
		{name: "history event without a time", change: func(m map[string]any) { m["history"] = []any{map[string]any{"what": "created"}} }, status: 400, field: "history.0.at"},
		{name: "bad base64", change: func(m map[string]any) { m["payload_base64"] = "!!" }, status: 400, field: "payload_base64"},
		{name: "payload over the cap", change: func(m map[string]any) {
			m["payload_base64"] = strings.Repeat("A", 100_000)
			delete(m, "payload")
		}, status: 413},
		{name: "not JSON", raw: "{", status: 400, msg: "line 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line := []byte(tt.raw)
			if tt.change != nil {
				line = importLine(newID(), tt.change)
			}
			_, err := admin.Import(ctx, ndjson([][]byte{good, line}))
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != tt.status || ce.Field != tt.field || !strings.HasPrefix(ce.Message, "line 2") {
				t.Fatalf("err = %#v, want %d naming field %q at line 2", err, tt.status, tt.field)
			}
		})
	}
	// Nothing of a refused request was stored.
	if _, err := s.client.Get(ctx, decodeTask(t, good).ID); !client.IsNotFound(err) {
		t.Errorf("the good line of refused requests: %v, want not found", err)
	}

	// Too many tasks, or none.
	many := make([][]byte, 1001)
	for i := range many {
		many[i] = good
	}
	if _, err := admin.Import(ctx, ndjson(many)); !isStatus(err, 400) {
		t.Errorf("1001 tasks: %v", err)
	}
	if _, err := admin.Import(ctx, strings.NewReader("\n\n")); !isStatus(err, 400) {
		t.Errorf("no task: %v", err)
	}

	// Admin tokens only.
	if _, err := shop.Import(ctx, ndjson([][]byte{good})); !isStatus(err, http.StatusForbidden) {
		t.Errorf("import with an app token: %v", err)
	}
	if _, err := shop.Export(ctx, client.ExportOptions{App: "shop"}); !isStatus(err, http.StatusForbidden) {
		t.Errorf("export with an app token: %v", err)
	}
	if _, err := admin.Export(ctx, client.ExportOptions{State: "sleeping"}); !isStatus(err, 400) {
		t.Errorf("export of a bad state: %v", err)
	}

	// The good line alone is imported; a line repeated in one request
	// counts once.
	res, err := admin.Import(ctx, ndjson([][]byte{good, good}))
	if err != nil || res.Imported != 1 || res.Existing != 1 {
		t.Errorf("import: %+v, %v", res, err)
	}
}

// TestImportDeliveringAndMoved: a task exported while being delivered is
// imported scheduled and due now, and fires; a task whose id names a shard
// the store lacks, or not its key's (in cluster mode), keeps its id, and
// every route finds it by it.
func TestImportDeliveringAndMoved(t *testing.T) {
	ctx := context.Background()
	rcv := testkit.NewReceiver(t)
	s := startServer(t, "", nil)
	inFlight := newID()
	exp := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	line := importLine(inFlight, func(m map[string]any) {
		m["state"], m["attempts"], m["lease"], m["lease_expires_at"] = "delivering", 1, "0123abcd0123456789abcdef", exp
		m["due_at"], m["next_attempt_at"] = time.Now().UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano)
		m["target"] = map[string]any{"http": map[string]any{"url": rcv.URL + "/hook"}}
	})
	far := idGen.New(time.Now(), 9) // shard 9: past a test cluster's 4
	farLine := importLine(far, nil)
	keyless := idGen.New(time.Now(), 0)
	keylessLine := importLine(keyless, func(m map[string]any) { delete(m, "key") })

	res, err := s.client.Import(ctx, ndjson([][]byte{line, farLine, keylessLine}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Imported != 3 || res.Released != 1 {
		t.Fatalf("import: %+v", res)
	}
	got := waitState(t, s, inFlight, task.Delivered, 10*time.Second)
	var what []string
	for _, ev := range got.History {
		what = append(what, ev.What)
	}
	if !strings.Contains(strings.Join(what, ","), "released,attempt,delivered") || got.Attempts != 1 {
		t.Errorf("history %v, attempts %d", what, got.Attempts)
	}

	// Ids are kept in every mode, whatever shard they name (issue 23).
	if len(res.Moved) != 0 {
		t.Errorf("import moved %v, want none", res.Moved)
	}
	for _, id := range []task.ID{far, keyless} {
		tk, err := s.client.Get(ctx, id)
		if err != nil {
			t.Fatalf("GET %s after the import: %v", id, err)
		}
		if tk.ID != id {
			t.Errorf("GET %s answered task %s", id, tk.ID)
		}
	}
	// A re-import finds them by id.
	res, err = s.client.Import(ctx, ndjson([][]byte{farLine, keylessLine}))
	if err != nil || res.Imported != 0 || res.Existing != 2 {
		t.Errorf("import again: %+v, %v", res, err)
	}
	// Another task holding a key is reported, not overwritten.
	other := importLine(newID(), func(m map[string]any) { m["key"] = "k-" + far.String() })
	res, err = s.client.Import(ctx, ndjson([][]byte{other}))
	if err != nil || res.Imported != 0 || len(res.Taken) != 1 || res.Taken[0].Holder != far {
		t.Errorf("import of a taken key: %+v, %v", res, err)
	}
	// The routes that take an id work with it.
	due := time.Now().Add(2 * time.Hour)
	if tk, err := s.client.Patch(ctx, far, client.PatchRequest{DueAt: &due}); err != nil || tk.ID != far || !tk.DueAt.Equal(task.Ms(due)) {
		t.Errorf("PATCH %s: %v, %v", far, tk, err)
	}
	if err := s.client.Cancel(ctx, far); err != nil {
		t.Errorf("DELETE %s: %v", far, err)
	}
	if tk, err := s.client.GetByKey(ctx, "shop", "k-"+far.String()); err != nil || tk.ID != far || tk.State != task.Cancelled {
		t.Errorf("GET by key of %s: %v, %v", far, tk, err)
	}
}

// TestExportImportSchedules exports a server's schedules (an interval and
// a cron one with a pending occurrence, a paused one) with their
// occurrences, and imports them into another server of the same mode:
// each schedule arrives with its id, key, rule and next_at, its pending
// occurrence is the imported task (no second one), a re-import imports
// nothing, and the schedules go on firing.
func TestExportImportSchedules(t *testing.T) {
	ctx := context.Background()
	rcv := testkit.NewReceiver(t)
	src := startServer(t, "", nil)
	dst := startServer(t, "", nil)
	mk := func(r client.CreateScheduleRequest) *task.Schedule {
		t.Helper()
		r.App, r.Target, r.Payload = "shop", rcv.Target(), json.RawMessage(`{"s":"`+r.Key+`"}`)
		sc, _, err := src.client.CreateSchedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	tick := mk(client.CreateScheduleRequest{Key: "tick", Every: task.Duration(2 * time.Second)})
	hourly := mk(client.CreateScheduleRequest{Key: "hourly", Cron: "0 * * * *", Timezone: "Europe/Berlin"})
	paused := mk(client.CreateScheduleRequest{Key: "paused", Every: task.Duration(time.Hour)})
	if _, err := src.client.PauseSchedule(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	ids := []task.ID{tick.ID, hourly.ID, paused.ID}
	// Stop tick's firing on the source: its pending occurrence moves with
	// it (a move exports a store no server runs on).
	if _, err := src.client.PauseSchedule(ctx, tick.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := src.client.ResumeSchedule(ctx, tick.ID); err != nil {
		t.Fatal(err)
	}

	lines := exportAll(t, src.client, client.ExportOptions{})
	var tasks [][]byte
	exported := map[task.ID]*task.Schedule{}
	for _, l := range lines {
		var ln struct {
			Schedule *task.Schedule `json:"schedule"`
		}
		if err := json.Unmarshal(l, &ln); err != nil {
			t.Fatal(err)
		}
		if ln.Schedule == nil {
			if len(exported) > 0 {
				t.Errorf("a task after the schedules: %s", l)
			}
			tasks = append(tasks, l)
			continue
		}
		exported[ln.Schedule.ID] = ln.Schedule
	}
	if len(exported) != 3 {
		t.Fatalf("%d schedules exported, want 3: %s", len(exported), bytes.Join(lines, []byte("\n")))
	}
	if got := exportAll(t, src.client, client.ExportOptions{State: task.Scheduled}); len(got) != len(tasks)-countFinal(t, tasks) {
		t.Errorf("an export of one state holds schedules: %s", got)
	}

	res, err := dst.client.Import(ctx, ndjson(lines))
	if err != nil {
		t.Fatal(err)
	}
	if res.Imported != len(tasks) || res.SchedulesImported != 3 || len(res.SchedulesTaken) != 0 {
		t.Fatalf("import: %+v", res)
	}
	for _, id := range ids {
		got, err := dst.client.GetSchedule(ctx, id)
		if err != nil {
			t.Fatalf("GET schedule %s after the import: %v", id, err)
		}
		want := exported[id]
		if id == tick.ID {
			continue // it may have fired since
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("schedule %s after the import (-exported +imported):\n%s", id, diff)
		}
	}
	// The hourly one's pending occurrence is the imported task, alone.
	hr := exported[hourly.ID]
	occ, err := dst.client.GetByKey(ctx, "shop", task.OccurrenceKey("hourly", *hr.NextAt))
	if err != nil || occ.ScheduleID != hourly.ID {
		t.Fatalf("the pending occurrence of the hourly schedule: %v, %v", occ, err)
	}
	if src, err := src.client.GetByKey(ctx, "shop", task.OccurrenceKey("hourly", *hr.NextAt)); err != nil || src.ID != occ.ID {
		t.Errorf("the pending occurrence on the target is %s, on the source %v (%v)", occ.ID, src, err)
	}
	if n := len(occurrencesOf(t, dst, "shop", "hourly")); n != 1 {
		t.Errorf("the hourly schedule has %d occurrences on the target, want 1", n)
	}
	// Again: nothing imported.
	res, err = dst.client.Import(ctx, ndjson(lines))
	if err != nil || res.Imported != 0 || res.SchedulesImported != 0 || res.SchedulesExisting != 3 {
		t.Errorf("import again: %+v, %v", res, err)
	}
	// The interval schedule goes on firing on the target.
	before := len(rcv.Deliveries())
	testkit.WaitFor(t, 10*time.Second, "tick to fire on the target", func() bool {
		got, err := dst.client.GetSchedule(ctx, tick.ID)
		return err == nil && got.LastAt != nil && len(rcv.Deliveries()) > before
	})

	// A bad schedule line is refused, naming its line and field.
	bad := bytes.Replace(lines[len(lines)-1], []byte(`"state":"`), []byte(`"state":"x`), 1)
	_, err = dst.client.Import(ctx, ndjson([][]byte{lines[0], bad}))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 400 || !strings.HasPrefix(ce.Message, "line 2 (schedule ") || ce.Field != "state" {
		t.Errorf("import of a bad schedule line: %v", err)
	}
}

// countFinal counts the tasks of lines in a final state.
func countFinal(t *testing.T, lines [][]byte) int {
	n := 0
	for _, l := range lines {
		if decodeTask(t, l).State.Final() {
			n++
		}
	}
	return n
}
