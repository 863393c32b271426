package cli

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/task"
)

// pagedTasks answers list requests with tasks in pages of two, the cursor
// being the index of the page's first task.
func pagedTasks(t *testing.T, tasks []*task.Task) func(request) answer {
	return func(r request) answer {
		start := 0
		if c := r.Query.Get("cursor"); c != "" {
			fmt.Sscan(c, &start)
		}
		end := min(start+2, len(tasks))
		next := ""
		if end < len(tasks) {
			next = fmt.Sprint(end)
		}
		body := fmt.Sprintf(`{"tasks":%s`, jsonOf(t, tasks[start:end]))
		if next != "" {
			body += fmt.Sprintf(`,"next_cursor":%q`, next)
		}
		return answer{200, body + "}"}
	}
}

func deadTasks() []*task.Task {
	var tasks []*task.Task
	for i := range 3 {
		tk := sampleTask()
		tk.ID[15] = byte(i)
		tk.State = task.Dead
		tk.Attempts = 16
		tk.LastError = fmt.Sprintf("HTTP 500\tfrom\nhost %d", i)
		tasks = append(tasks, tk)
	}
	tasks[1].Key = ""
	tasks[2].LastError = ""
	return tasks
}

func line(tk *task.Task, key, lastError string) string {
	return strings.Join([]string{tk.ID.String(), "dead", "2026-03-01T12:00:00Z", key, "16", lastError}, "\t") + "\n"
}

func TestListOnePage(t *testing.T) {
	t.Parallel()
	tasks := deadTasks()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": pagedTasks(t, tasks)})
	stdout, stderr, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := line(tasks[0], "order-42", "HTTP 500 from host 0") + line(tasks[1], "-", "HTTP 500 from host 1")
	if d := cmp.Diff(want, stdout); d != "" {
		t.Errorf("stdout mismatch (-want +got):\n%s", d)
	}
	if stderr != "more: --cursor 2\n" {
		t.Errorf("stderr = %q, want the next cursor", stderr)
	}
	r := a.only(t)
	if d := cmp.Diff(url.Values{"state": {"dead"}, "limit": {"2"}}, r.Query); d != "" || r.Vars["app"] != "billing" {
		t.Errorf("app %q, query mismatch (-want +got):\n%s", r.Vars["app"], d)
	}
}

func TestListAll(t *testing.T) {
	t.Parallel()
	tasks := deadTasks()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": pagedTasks(t, tasks)})
	stdout, stderr, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--all")
	if err != nil {
		t.Fatal(err)
	}
	want := line(tasks[0], "order-42", "HTTP 500 from host 0") + line(tasks[1], "-", "HTTP 500 from host 1") + line(tasks[2], "order-42", "-")
	if d := cmp.Diff(want, stdout); d != "" {
		t.Errorf("stdout mismatch (-want +got):\n%s", d)
	}
	if stderr != "" {
		t.Errorf("stderr = %q", stderr)
	}
	var cursors []string
	for _, r := range a.requests() {
		cursors = append(cursors, r.Query.Get("cursor"))
	}
	if d := cmp.Diff([]string{"", "2"}, cursors); d != "" {
		t.Errorf("cursors mismatch (-want +got):\n%s", d)
	}
}

func TestListJSON(t *testing.T) {
	t.Parallel()
	tasks := deadTasks()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": pagedTasks(t, tasks)})

	stdout, _, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--json", "--cursor", "0")
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, fmt.Sprintf(`{"tasks":%s,"next_cursor":"2"}`, jsonOf(t, tasks[:2])), stdout)

	stdout, _, err = runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--json", "--all")
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, fmt.Sprintf(`{"tasks":%s}`, jsonOf(t, tasks)), stdout)
}

func TestListEmpty(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": fixed(200, `{"tasks":[]}`)})
	stdout, stderr, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--all")
	if err != nil || stdout != "" || stderr != "" {
		t.Errorf("err %v, stdout %q, stderr %q; want nothing", err, stdout, stderr)
	}
	stdout, _, err = runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--json")
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, `{"tasks":[]}`, stdout)
}

func TestListStuckCursor(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": fixed(200, `{"tasks":[],"next_cursor":"same"}`)})
	_, _, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--state", "dead", "--all", "--cursor", "same")
	if err == nil || !strings.Contains(err.Error(), "same cursor") {
		t.Errorf("err = %v, want the loop stopped", err)
	}
}

func TestListUsageErrors(t *testing.T) {
	t.Parallel()
	a := newAPI(t, nil)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "dead"}, "list: --app is required"},
		{[]string{"--app", "a", "--state", "zombie"}, `list: --state: want one of scheduled, delivering, delivered, dead, expired, cancelled, got "zombie"`},
		{[]string{"--app", "a", "--state", "dead", "--limit", "-1"}, "list: --limit must not be negative"},
		{[]string{"--app", "a", "--state", "dead", "extra"}, `list: unexpected argument "extra"`},
	} {
		_, _, err := runCLI(t, serverEnv(a), append([]string{"list"}, tt.args...)...)
		checkUsageError(t, err, tt.want)
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("API got %d requests, want none", n)
	}
}

// Without --state the listing goes through every state in turn, stepping
// over empty ones, with cursors that name the state they continue.
func TestListEveryState(t *testing.T) {
	t.Parallel()
	dead := deadTasks()
	sched := sampleTask()
	sched.ID[15] = 9
	byState := map[string][]*task.Task{"scheduled": {sched}, "dead": dead}
	a := newAPI(t, map[string]func(request) answer{"GET /v1/apps/{app}/tasks": func(r request) answer {
		return pagedTasks(t, byState[r.Query.Get("state")])(r)
	}})
	stdout, stderr, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--json", "--all")
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	checkJSON(t, fmt.Sprintf(`{"tasks":%s}`, jsonOf(t, append([]*task.Task{sched}, dead...))), stdout)
	var asked []string
	for _, r := range a.requests() {
		asked = append(asked, r.Query.Get("state")+":"+r.Query.Get("cursor"))
	}
	want := []string{"scheduled:", "delivering:", "delivered:", "dead:", "dead:2", "expired:", "cancelled:"}
	if d := cmp.Diff(want, asked); d != "" {
		t.Errorf("requests (state:cursor) mismatch (-want +got):\n%s", d)
	}

	// One page at a time: the cursor printed continues where the page ended.
	_, stderr, err = runCLI(t, serverEnv(a), "list", "--app", "billing")
	if err != nil || stderr != "more: --cursor delivering:\n" {
		t.Errorf("first page: err %v, stderr %q, want the cursor of the next state", err, stderr)
	}
	stdout, stderr, err = runCLI(t, serverEnv(a), "list", "--app", "billing", "--cursor", "delivering:")
	if err != nil || stderr != "more: --cursor dead:2\n" || strings.Count(stdout, "\n") != 2 {
		t.Errorf("second page: err %v, stdout %q, stderr %q; want dead's first 2 and its cursor", err, stdout, stderr)
	}
	if _, _, err := runCLI(t, serverEnv(a), "list", "--app", "billing", "--cursor", "2"); err == nil || !strings.Contains(err.Error(), "STATE:CURSOR") {
		t.Errorf("a cursor without a state: err %v, want a usage error", err)
	}
}
