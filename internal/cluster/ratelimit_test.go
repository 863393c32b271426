package cluster

import (
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
)

// TestRateLimiterTake: the burst is granted at once, then nothing until a
// token's interval has passed; a grant is never more than was asked.
func TestRateLimiterTake(t *testing.T) {
	rdb, prefix := testsvc.Redis(t)
	r := NewRateLimiter(rdb, prefix+":rate", prefix+":wake")
	ctx := t.Context()
	got, wait, err := r.Take(ctx, "a", 10, 5, 3)
	if err != nil || got != 3 || wait != 0 {
		t.Fatalf("first take of 3: got %d, wait %s, %v; want 3 at once", got, wait, err)
	}
	got, _, err = r.Take(ctx, "a", 10, 5, 100)
	if err != nil || got != 2 {
		t.Fatalf("take of the rest of the burst: got %d, %v; want 2", got, err)
	}
	got, wait, err = r.Take(ctx, "a", 10, 5, 1)
	if err != nil || got != 0 || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("take past the burst: got %d, wait %s, %v; want 0 and a wait of at most 100ms", got, wait, err)
	}
	time.Sleep(wait)
	if got, _, err = r.Take(ctx, "a", 10, 5, 1); err != nil || got != 1 {
		t.Fatalf("take after the wait: got %d, %v; want 1", got, err)
	}
	if got, _, err = r.Take(ctx, "b", 10, 5, 1); err != nil || got != 1 {
		t.Fatalf("another app has its own bucket: got %d, %v", got, err)
	}
}

// TestRateLimiterSlots: at most max holders at once; a holder that has a
// slot keeps it; a release of a full set announces the free slot; a hold
// that ran out frees its slot by itself.
func TestRateLimiterSlots(t *testing.T) {
	rdb, prefix := testsvc.Redis(t)
	wake := prefix + ":wake"
	r := NewRateLimiter(rdb, prefix+":rate", wake)
	ctx := t.Context()
	sub := rdb.Subscribe(ctx, wake)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	got, next, err := r.Acquire(ctx, "a", []string{"h1", "h2", "h3", "h4"}, 3, until)
	if err != nil || got != 3 || next.UnixMilli() != until.UnixMilli() {
		t.Fatalf("acquire 4 of 3: got %d, next %s, %v; want 3 and the first hold's end", got, next, err)
	}
	if got, _, err = r.Acquire(ctx, "a", []string{"h2", "h4"}, 3, until); err != nil || got != 1 {
		t.Fatalf("h2 again then h4: got %d, %v; want 1 (h2 keeps its slot, h4 gets none)", got, err)
	}
	if err := r.Release(ctx, "a", "h1", 3); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "slot a" {
		t.Fatalf("after a release of a full set: %v, %v; want the notice \"slot a\"", msg, err)
	}
	if got, _, err = r.Acquire(ctx, "a", []string{"h4"}, 3, until); err != nil || got != 1 {
		t.Fatalf("h4 after the release: got %d, %v; want 1", got, err)
	}
	// Holds that run out: a node that died holding slots.
	short := time.Now().Add(50 * time.Millisecond)
	if got, _, err = r.Acquire(ctx, "b", []string{"x", "y"}, 2, short); err != nil || got != 2 {
		t.Fatalf("b: got %d, %v", got, err)
	}
	if got, _, _ = r.Acquire(ctx, "b", []string{"z"}, 2, until); got != 0 {
		t.Fatalf("b full: got %d, want 0", got)
	}
	// Until the holds run out, z is refused (and takes nothing); then it
	// gets its slot.
	testkit.WaitFor(t, 5*time.Second, "b's holds to run out", func() bool {
		got, _, err = r.Acquire(ctx, "b", []string{"z"}, 2, until)
		if err != nil || got > 1 {
			t.Fatalf("b while its holds run out: got %d, %v; want 0, then 1", got, err)
		}
		return got == 1
	})
	if time.Now().Before(short) {
		t.Errorf("z got a slot before b's holds ran out")
	}
}
