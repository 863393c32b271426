package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestClusterPullNodeKilled: two nodes over one PostgreSQL and Redis. Pull
// tasks created on one are claimed on the other, from Redis; that node is
// killed (SIGKILL) with them claimed and not acked. Each is claimable again
// on the node left once its lease ran out, none lost, and acked there; an
// ack under a lease of the killed node is a conflict.
func TestClusterPullNodeKilled(t *testing.T) {
	env := newClusterEnv(t)
	dir := t.TempDir()
	a := startChild(t, dir+"/a", env.flags()...)
	b := startChild(t, dir+"/b", env.flags()...)
	ctx := context.Background()
	const n = 300
	pull := task.Target{Pull: &task.PullTarget{}}
	var reqs []client.ScheduleRequest
	for i := range n {
		reqs = append(reqs, client.ScheduleRequest{App: "pulls", Key: fmt.Sprintf("p-%d", i), Delay: task.Duration(200 * time.Millisecond), Target: pull})
	}
	want := map[task.ID]bool{}
	rs, err := a.client().ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		want[r.Task.ID] = true
	}
	claimAll := func(cl *client.Client, round string, lease time.Duration) map[task.ID]string {
		leases := map[task.ID]string{}
		testkit.WaitFor(t, 60*time.Second, round+": every task claimed", func() bool {
			got, err := cl.Claim(ctx, "pulls", client.ClaimRequest{Max: 100, Lease: task.Duration(lease), Wait: task.Duration(time.Second)})
			if err != nil {
				t.Logf("%s: claim: %v", round, err)
				return false
			}
			for _, tk := range got {
				if !want[tk.ID] {
					t.Fatalf("%s: claimed task %s, not one of those created", round, tk.ID)
				}
				if _, dup := leases[tk.ID]; dup {
					t.Fatalf("%s: task %s claimed twice", round, tk.ID)
				}
				if tk.State != task.Delivering || tk.Lease == "" || tk.LeaseExpiresAt == nil {
					t.Fatalf("%s: claimed task %s is %s with lease %q until %v", round, tk.ID, tk.State, tk.Lease, tk.LeaseExpiresAt)
				}
				leases[tk.ID] = tk.Lease
			}
			return len(leases) == n
		})
		return leases
	}
	before := claimAll(b.client(), "on node b", 2*time.Second)
	b.kill(t)

	cl := a.client()
	after := claimAll(cl, "on node a after b's kill", time.Minute)
	var old, acks []client.AckItem
	for id, lease := range after {
		acks = append(acks, client.AckItem{ID: id, Lease: lease})
		old = append(old, client.AckItem{ID: id, Lease: before[id]})
	}
	errs, err := cl.AckMany(ctx, "pulls", old[:10])
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !client.IsConflict(err) {
			t.Errorf("ack under the killed node's lease (task %s): %v, want a conflict", old[i].ID, err)
		}
	}
	for i := 0; i < len(acks); i += 100 {
		errs, err := cl.AckMany(ctx, "pulls", acks[i:min(i+100, len(acks))])
		if err != nil {
			t.Fatal(err)
		}
		for j, err := range errs {
			if err != nil {
				t.Errorf("ack of task %s: %v", acks[i+j].ID, err)
			}
		}
	}
	for id := range want {
		tk, err := cl.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != task.Delivered || tk.Attempts != 2 {
			t.Errorf("task %s after the ack: %s, %d attempts; want delivered, 2 attempts (the killed node's lease, and this one)", id, tk.State, tk.Attempts)
		}
	}
	if got, err := cl.Claim(ctx, "pulls", client.ClaimRequest{Max: 1000, Lease: task.Duration(time.Minute)}); err != nil || len(got) != 0 {
		t.Errorf("a claim after every ack: %d tasks, %v; want none", len(got), err)
	}
}
