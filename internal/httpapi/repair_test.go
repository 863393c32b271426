package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestRepairRestoresLostRedisWrite: the SQL commit of a task succeeds but
// its Redis member is lost (deleted here, as a crash between the two writes
// or a Redis restart would). The repair scan promotes it again from SQL and
// it is delivered.
func TestRepairRestoresLostRedisWrite(t *testing.T) {
	if backendName == "embedded" {
		t.Skip("cluster backends only (TOC_TEST_BACKEND=postgres|mysql|rediscluster)")
	}
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	ctx := context.Background()
	tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "repair", Key: "k", Delay: task.Duration(time.Second), Target: rcv.Target()})
	if err != nil {
		t.Fatal(err)
	}
	// Lose the Redis side: every queue of the task's slot.
	if err := s.forgetRedis(ctx, "repair"); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, s, tk.ID, task.Delivered, 20*time.Second)
	if got.Attempts != 1 {
		t.Errorf("attempts %d, want 1", got.Attempts)
	}
	if n := len(rcv.Deliveries()); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
}
