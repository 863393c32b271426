package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/toc-dev/toc/task"
)

// TestAppendAcks: the ack body is what json.Marshal wrote of it, leases
// that need escaping included.
func TestAppendAcks(t *testing.T) {
	id, err := task.ParseID("01M8D4BDA300017P7MZZ5NX33N")
	if err != nil {
		t.Fatal(err)
	}
	for _, acks := range [][]AckItem{
		{{ID: id, Lease: "e19ebaad1a36123267d5aed4"}},
		{{ID: id}, {ID: id, Lease: `"<é>\&` + "\x01"}, {ID: task.ID{}, Lease: "x"}},
	} {
		want, err := json.Marshal(struct {
			Acks []AckItem `json:"acks"`
		}{acks})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendAcks(nil, acks); !bytes.Equal(got, want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

// FuzzAckAnswer holds ackAnswer's reading to encoding/json's: the same
// results (their count, and each one's error) or both an error.
func FuzzAckAnswer(f *testing.F) {
	for _, s := range []string{
		`{"results":[{}]}` + "\n",
		`{"results":[{},{},{}]}`,
		`{"results":[{},{"error":{"code":"conflict","message":"m"}},{}]}`,
		`{"results":[]}`,
		`{"results":[{},{}}`,
		`{"results":[{}{}]}`,
		`{"results":[{},,{}]}`,
		`{"results":[{} ,{}]}`,
		`{"results":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast ackAnswer
		fastErr := fast.decodeBody(b)
		type plain ackAnswer
		var slow plain
		slowErr := json.NewDecoder(bytes.NewReader(b)).Decode(&slow)
		if (fastErr == nil) != (slowErr == nil) {
			t.Fatalf("%q: fast error %v, slow %v", b, fastErr, slowErr)
		}
		if fastErr == nil && !reflect.DeepEqual(fast.Results, slow.Results) {
			t.Fatalf("%q: fast %+v, slow %+v", b, fast.Results, slow.Results)
		}
	})
}
