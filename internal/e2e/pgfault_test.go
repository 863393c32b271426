package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestClusterPostgresRestarted: one node, then two, over a PostgreSQL of
// the test's own, stopped 1 s before a wave of tasks falls due and started
// again 3 s later. The nodes keep timing from Redis; fires that cannot read
// their tasks are tried again every second, so the tasks due while
// PostgreSQL was down go out once it answers: every task is delivered, none
// early, and the worst is late by the downtime and a few seconds, not by a
// repair period.
func TestClusterPostgresRestarted(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) { postgresRestarted(t, nodes) })
	}
}

func postgresRestarted(t *testing.T, nodes int) {
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	prefix, pg, dsn := privateCluster(t)
	ctx := context.Background()
	rcv := newHooks(t)
	var all []*child
	for range nodes {
		all = append(all, startChild(t, t.TempDir(), clusterEnv{dsn: dsn, prefix: prefix}.flags()...))
	}
	node := all[0]
	w := scheduleWave(t, node, rcv, 300, time.Now().Add(5*time.Second), 3*time.Second)
	start := w.start
	time.Sleep(time.Until(start.Add(-time.Second)))
	pg.Stop()
	time.Sleep(3 * time.Second)
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("PostgreSQL down from 1 s before the first task was due until %s after", back.Sub(start).Round(time.Millisecond))

	missing, dups, worstAfterBack := w.await(t, back)
	t.Logf("%d tasks: %d missing, %d duplicate deliveries, worst delivery %s after PostgreSQL answered again (or after its due time)", w.n, missing, dups, worstAfterBack.Round(time.Millisecond))
	if missing > 0 || worstAfterBack > 5*time.Second {
		for i, c := range all {
			out := c.stderr.String()
			t.Logf("node %d log (last 3000 bytes):\n%s", i, out[max(0, len(out)-3000):])
		}
		t.Errorf("%d of %d tasks never delivered; worst %s after PostgreSQL was back, want within 5 s", missing, w.n, worstAfterBack)
	}
}

// TestClusterPostgresRestartUnderOutcomes: a node delivers a wave of tasks
// while its PostgreSQL (the test's own) is restarted in the middle of it,
// so that outcome writes meet the shutdown (57P01, "terminating connection
// due to administrator command") or a refused connection. Each such write
// is tried again on a new connection until the database answers: every
// task is delivered once and stored delivered. An outcome write given up
// at once left its task due, and it was delivered again (issue 22).
func TestClusterPostgresRestartUnderOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	prefix, pg, dsn := privateCluster(t)
	ctx := context.Background()
	rcv := newHooks(t)
	// The receiver answers in 300 ms, so that tens of deliveries are
	// under way when the database goes away, and their outcomes are
	// written while it is down or starting.
	inner := rcv.Config.Handler
	rcv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(rcv.Close)
	node := startChild(t, t.TempDir(), clusterEnv{dsn: dsn, prefix: prefix}.flags()...)
	w := scheduleWave(t, node, rcv, 400, time.Now().Add(3*time.Second), 4*time.Second)
	// The fault's timing, not a wait for a result: the restart falls in
	// the middle of the wave.
	time.Sleep(time.Until(w.start.Add(1500 * time.Millisecond)))
	pg.Stop()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	missing, _, _ := w.await(t, back)
	if missing > 0 {
		t.Fatalf("%d of %d tasks never delivered", missing, w.n)
	}
	cl := node.client()
	testkit.WaitFor(t, 60*time.Second, "every task to be stored delivered", func() bool {
		for _, id := range w.ids {
			tid, err := task.ParseID(id)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := cl.Get(ctx, tid)
			if err != nil || tk.State != task.Delivered {
				return false
			}
		}
		return true
	})
	t.Logf("outcome writes tried again after meeting the restart: %d", strings.Count(node.stderr.String(), "database unavailable; trying again"))
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	dups := 0
	for _, id := range w.ids {
		dups += rcv.count[id] - 1
	}
	if dups > 0 {
		out := node.stderr.String()
		t.Logf("node log (last 3000 bytes):\n%s", out[max(0, len(out)-3000):])
		t.Errorf("%d duplicate deliveries of %d tasks, want none: outcome writes that met the restart were not tried again", dups, w.n)
	}
}

// privateCluster returns a Redis key prefix of the test's own and a
// private PostgreSQL (the test may stop and start it) with a database toc,
// and that database's DSN.
func privateCluster(t *testing.T) (prefix string, pg *testsvc.PrivatePostgres, dsn string) {
	t.Helper()
	_, prefix = testsvc.Redis(t)
	pg = testsvc.StartPrivatePostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE toc"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	return prefix, pg, strings.Replace(pg.DSN, "/postgres?", "/toc?", 1)
}
