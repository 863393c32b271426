package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLimitedSheds(t *testing.T) {
	h := &Handler{slots: make(chan struct{}, 1)}
	inside := make(chan struct{})
	release := make(chan struct{})
	blocking := h.limited(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		blocking(rec, httptest.NewRequest("GET", "/", nil))
		done <- rec.Code
	}()
	<-inside
	rec := httptest.NewRecorder()
	h.limited(func(w http.ResponseWriter, r *http.Request) { t.Error("ran past the limit") })(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("over the limit: %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(release)
	if code := <-done; code != http.StatusNoContent {
		t.Errorf("first request: %d", code)
	}
	rec = httptest.NewRecorder()
	h.limited(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 204 {
		t.Errorf("after the slot freed: %d", rec.Code)
	}
}
