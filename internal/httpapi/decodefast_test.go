package httpapi

import (
	"reflect"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzCreateFast holds createFast to decodeBytes: whatever item it takes
// (of those the batch's decoder passes), decodeBytes takes too and reads
// into the same createRequest.
func FuzzCreateFast(f *testing.F) {
	for _, s := range []string{
		`{"app":"bench","key":"k1","due_at":"2026-01-02T15:04:05.123Z","payload":{"order":12345},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`,
		`{"app":"a","delay":"1s","payload":[1, "x\"}"] ,"target":{"pull":{}}}`,
		` { "app" : "a" , "payload" : 12 , "target" : { "http" : { "timeout" : "1.5s" } } } `,
		`{"app":"a","payload":null}`,
		`{"app":"a","payload":"s","payload_base64":"AA==","deadline":"x"}`,
		`{"app":"a","target":{"http":{"timeout":"forever"}}}`,
		`{"app":"a","target":{"http":{"headers":{"A":"b"}}}}`,
		`{"app":"a","retry":{"max_attempts":3}}`,
		`{"app":"a\u00e9","key":null}`,
		`{"App":"a"}`,
		`{"app":"a","target":{}}`,
		`{"app":"a","target":{"pull":{},"http":{}}}`,
		`{"app":"a","payload":true,"key":""}`,
		`{}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !jsontext.Value(raw).IsValid() {
			return // the batch's decoder passes no such item
		}
		var fast createRequest
		if !createFast(raw, &fast) {
			return
		}
		var slow createRequest
		if err := decodeBytes(raw, &slow); err != nil {
			t.Fatalf("createFast took %s, which decodeBytes refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\nfast %#v\nslow %#v", raw, fast, slow)
		}
	})
}

// TestCreateFastTakesClients: the items the Go client writes are read by
// hand (else the fast path is dead code).
func TestCreateFastTakesClients(t *testing.T) {
	for _, s := range []string{
		`{"app":"bench","key":"k1","due_at":"2026-01-02T15:04:05.123Z","payload":{"order":12345},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`,
		`{"app":"bench","key":"k2","delay":"0s","target":{"pull":{}}}`,
	} {
		var cr createRequest
		if !createFast([]byte(s), &cr) {
			t.Errorf("left to decodeBytes: %s", s)
		}
	}
}

// FuzzCreatePlain holds createPlain to decodeBytes for any body: whatever
// it takes, decodeBytes takes too and reads into the same createRequest.
func FuzzCreatePlain(f *testing.F) {
	for _, s := range []string{
		`{"app":"bench","key":"k1","due_at":"2026-01-02T15:04:05.123Z","payload":{"order":12345},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`,
		`{"app":"a","delay":"1s","payload":[1, "x\"}"] ,"target":{"pull":{}}}`,
		`{"app":"a","payload":{"a":1,"a":2}}`,
		`{"app":"a","payload":{"a":1,}}`,
		`{"app":"a","payload":tru}`,
		`{"app":"a","payload":"\x"}`,
		"{\"app\":\"a\xff\"}",
		`{"app":"a","app":"b"}`,
		`{"app":"a"} x`,
		`{"app":"a","payload":1 2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast createRequest
		if !createPlain(raw, &fast) {
			return
		}
		var slow createRequest
		if err := decodeBytes(raw, &slow); err != nil {
			t.Fatalf("createPlain took %s, which decodeBytes refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\nfast %#v\nslow %#v", raw, fast, slow)
		}
	})
}
