package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestBackupRestore runs `toc backup` against a running `toc serve`, stops
// it, and serves the copy: every task is there, and the ones that came due
// while no server ran fire on start.
func TestBackupRestore(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	h := newHooks(t)
	root := t.TempDir()
	c := startChild(t, filepath.Join(root, "data"))
	cl := c.client()

	soon := time.Now().Add(6 * time.Second)
	var due, later []task.ID
	for i := range 20 {
		tk, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: fmt.Sprintf("soon-%d", i), DueAt: &soon,
			Target: task.Target{HTTP: &task.HTTPTarget{URL: h.URL}}})
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, tk.ID)
		tk, _, err = cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Payload: []byte(`{"n":` + fmt.Sprint(i) + `}`),
			Target: task.Target{Pull: &task.PullTarget{}}})
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, tk.ID)
	}

	copyDir := filepath.Join(root, "copy")
	out, err := runChild(t, "backup", "--server", c.url, "--to", copyDir)
	if err != nil || !strings.HasPrefix(out, "backed up to "+copyDir+": ") {
		t.Fatalf("toc backup: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	if err, _ := c.terminate(t); err != nil {
		t.Fatalf("toc serve: %v", err)
	}
	if time.Now().After(soon) {
		t.Fatal("the backup took until the tasks were due; the test cannot tell who fired them")
	}
	for _, id := range due {
		if h.seen(id.String()) {
			t.Fatalf("task %s delivered before it was due", id)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "downtime past the due time", func() bool { return time.Now().After(soon) })

	r := startChild(t, copyDir)
	rc := r.client()
	for _, id := range later {
		tk, err := rc.Get(ctx, id)
		if err != nil || tk.State != task.Scheduled {
			t.Fatalf("task %s in the copy: %v, %+v", id, err, tk)
		}
	}
	testkit.WaitFor(t, 15*time.Second, "the tasks due during the downtime to fire", func() bool {
		for _, id := range due {
			if !h.seen(id.String()) {
				return false
			}
		}
		return true
	})
	// A second backup into the same place is refused before anything is
	// asked of the server.
	if out, err := runChild(t, "backup", "--server", r.url, "--to", copyDir); err == nil || !strings.Contains(out, "exists") {
		t.Errorf("backup into an existing directory: %v\n%s", err, out)
	}
}

// TestBackupClusterRefused: a cluster node answers 501, and toc backup
// leaves nothing behind.
func TestBackupClusterRefused(t *testing.T) {
	env := newClusterEnv(t)
	c := startChild(t, t.TempDir(), env.flags()...)
	dir := filepath.Join(t.TempDir(), "copy")
	out, err := runChild(t, "backup", "--server", c.url, "--to", dir)
	if err == nil || !strings.Contains(out, "cluster mode") || !strings.Contains(out, "HTTP 501") {
		t.Fatalf("toc backup of a cluster node: %v\n%s", err, out)
	}
	for _, p := range []string{dir, dir + ".partial"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v", p, err)
		}
	}
}
