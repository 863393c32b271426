package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// The README's test clock example ("Testing with a test clock"), as it is
// there but for the server's address: keep the two alike.

func placeOrder(ctx context.Context, toc *client.Client, order, hook string) error {
	_, _, err := toc.Schedule(ctx, client.ScheduleRequest{
		App: "shop", Key: "unpaid/" + order, Delay: task.Duration(30 * time.Minute),
		Payload: json.RawMessage(`{"order":"` + order + `"}`),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: hook}},
	})
	return err
}

func TestReadmeTestClockExample(t *testing.T) {
	c := startChild(t, t.TempDir(), "--test-clock")
	ctx := t.Context()
	toc := client.New(client.Config{BaseURL: c.url})
	var mu sync.Mutex
	var cancelled []string // the orders the timeout cancelled
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Order string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		cancelled = append(cancelled, body.Order)
		mu.Unlock()
	}))
	defer hook.Close()
	advance := func(d time.Duration) int {
		s, err := toc.AdvanceClock(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return s.Fired
	}

	if err := placeOrder(ctx, toc, "A-1", hook.URL); err != nil {
		t.Fatal(err)
	}
	if n := advance(29 * time.Minute); n != 0 {
		t.Fatalf("after 29 minutes %d timeouts fired, want none", n)
	}
	if err := toc.CancelByKey(ctx, "shop", "unpaid/A-1"); err != nil { // A-1 is paid
		t.Fatal(err)
	}
	if n := advance(2 * time.Minute); n != 0 {
		t.Fatalf("a paid order's timeout fired")
	}

	if err := placeOrder(ctx, toc, "B-2", hook.URL); err != nil { // B-2 is never paid
		t.Fatal(err)
	}
	if n := advance(30 * time.Minute); n != 1 {
		t.Fatalf("at minute 30 %d timeouts fired, want B-2's", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cancelled) != 1 || cancelled[0] != "B-2" {
		t.Fatalf("cancelled %v, want [B-2]", cancelled)
	}
}
