package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
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
	before := claimAll(t, ctx, b.client(), want, "on node b", claimRound{max: 100, lease: 2 * time.Second, within: time.Minute})
	b.kill(t)

	cl := a.client()
	after := claimAll(t, ctx, cl, want, "on node a after b's kill", claimRound{max: 100, lease: time.Minute, within: time.Minute})
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
