package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBodyBudget checks the budget of request bodies in memory: past it a
// request waits BodyWait, then gets 503 with Retry-After, unread; the half
// kept for small bodies still lets a create in while large bodies hold
// theirs; room given back lets the next one in; a body that says it is over
// its route's cap is refused at once.
func TestBodyBudget(t *testing.T) {
	h := New(Config{MaxBodyMemory: 64 << 20, BodyWait: 20 * time.Millisecond})
	ctx := context.Background()
	// Large bodies in flight hold the large half (32 MiB).
	if err := h.bodies.acquire(ctx, 32<<20); err != nil {
		t.Fatal(err)
	}
	post := func(path string, size int, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.ContentLength = int64(size)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// A batch of 1 MiB must wait, and is turned away.
	if w := post("/v1/tasks:batch", 1<<20, `{}`); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" ||
		!strings.Contains(w.Body.String(), "max_body_memory") {
		t.Fatalf("batch past the budget: %d %q %s, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	// A create still gets in (the answer is the decoder's 400, not 503).
	if w := post("/v1/tasks", 2, `{}`); w.Code != http.StatusBadRequest {
		t.Fatalf("create beside the large bodies: %d %s, want 400 from the decoder", w.Code, w.Body)
	}
	// Small bodies fill the rest: then a create waits too.
	if err := h.bodies.all.Acquire(ctx, 32<<20); err != nil {
		t.Fatal(err)
	}
	if w := post("/v1/tasks", 2, `{}`); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("create past the budget: %d %s, want 503", w.Code, w.Body)
	}
	// Given back, the room takes the batch.
	h.bodies.release(32 << 20)
	h.bodies.all.Release(32 << 20)
	if w := post("/v1/tasks:batch", 2, `{}`); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"tasks"`) {
		t.Fatalf("batch with room: %d %s, want 400 naming tasks", w.Code, w.Body)
	}
	// Every charge was given back when its request was answered.
	if !h.bodies.all.TryAcquire(64<<20) || !h.bodies.large.TryAcquire(32<<20) {
		t.Fatal("a request kept its charge after its answer")
	}
	h.bodies.all.Release(64 << 20)
	h.bodies.large.Release(32 << 20)
	// Over its route's cap by its Content-Length: 413 before anything is read.
	if w := post("/v1/tasks", 1<<20, `{}`); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("create of 1 MiB: %d %s, want 413", w.Code, w.Body)
	}
}
