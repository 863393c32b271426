package httpapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// BenchmarkDecodeCreate is the decoding of one create request, the bench's.
//
//	go test -run '^$' -bench DecodeCreate -benchmem ./internal/httpapi/
func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(`{"app":"bench","key":"run-123456","due_at":"2026-11-27T08:00:00.123456789Z","payload":{"seq":123456},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`)
	b.Run("decodeBytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			if err := decodeBytes(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("createPlain", func(b *testing.B) { // decodeCreate's
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			if !createPlain(body, &req) {
				b.Fatal("not read by hand")
			}
		}
	})
	b.Run("no-unmarshalers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			if err := json.Unmarshal(body, &req, json.RejectUnknownMembers(true)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeKeepsNothingOfTheBuffer: the body buffer goes back to the pool
// after decoding, so what a request decoded must not share it: a second
// request read into the same buffer leaves the first's fields as they were.
func TestDecodeKeepsNothingOfTheBuffer(t *testing.T) {
	body := func(app, key, url string, seq int) *http.Request {
		b := `{"app":"` + app + `","key":"` + key + `","due_at":"2026-11-27T08:00:00Z","payload":{"seq":` + strconv.Itoa(seq) + `},"target":{"http":{"url":"` + url + `","headers":{"X-A":"` + key + `"}}}}`
		return httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader(b))
	}
	var first createRequest
	if err := decode(httptest.NewRecorder(), body("aaaa", "kkkk", "http://h/one", 1111), 1<<20, &first); err != nil {
		t.Fatal(err)
	}
	for range 4 { // the pool may hand out another buffer: try a few
		var second createRequest
		if err := decode(httptest.NewRecorder(), body("bbbb", "zzzz", "http://h/two", 2222), 1<<20, &second); err != nil {
			t.Fatal(err)
		}
	}
	if first.App != "aaaa" || *first.Key != "kkkk" || string(first.Payload) != `{"seq":1111}` ||
		first.Target.HTTP.URL != "http://h/one" || first.Target.HTTP.Headers["X-A"] != "kkkk" {
		t.Errorf("the first request's fields changed: app %q key %q payload %s target %+v", first.App, *first.Key, first.Payload, *first.Target.HTTP)
	}
}

// TestReadAll: readAll reads what io.ReadAll does, past the buffer's
// capacity, and passes the body's error on (a body over its limit).
func TestReadAll(t *testing.T) {
	want := strings.Repeat("0123456789", 500)
	got, err := readAll(strings.NewReader(want), make([]byte, 0, 7))
	if err != nil || string(got) != want {
		t.Fatalf("readAll: %d bytes, %v; want %d", len(got), err, len(want))
	}
	r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(want)), 100)
	var mbe *http.MaxBytesError
	if _, err := readAll(r, nil); !errors.As(err, &mbe) {
		t.Fatalf("readAll over the limit: %v; want a *http.MaxBytesError", err)
	}
}

// TestDecodeCreate: a create's body reads as decodeBytes reads it, by hand
// or not, and what jsontext refuses (a name twice in the payload, invalid
// UTF-8 in a string the hand reader takes) is refused as decodeBytes
// refuses it.
func TestDecodeCreate(t *testing.T) {
	for _, body := range []string{
		`{"app":"bench","key":"k1","due_at":"2026-01-02T15:04:05.123Z","payload":{"seq":1},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`,
		`{"app":"bench","delay":"1s","target":{"http":{"url":"http://h/","headers":{"A":"b"}}}}`,
		`{"app":"bench","delay":"1s","payload":{"a":1,"a":2}}`,
		"{\"app\":\"b\xffe\",\"delay\":\"1s\"}",
		`{"app":"bench","delay":"1s"} {}`,
		``,
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader(body))
		var got createRequest
		gotErr := decodeCreate(httptest.NewRecorder(), r, 1<<20, &got)
		var want createRequest
		wantErr := decodeBytes([]byte(body), &want)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Errorf("%s: error %v, want %v", body, gotErr, wantErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ngot  %#v\nwant %#v", body, got, want)
		}
	}
}
