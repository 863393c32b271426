package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// FuzzAckPlain holds ackPlain to what decodeBytes and the handler's loop
// make of the same body: whatever it takes, they take too, with the same
// ids and leases.
func FuzzAckPlain(f *testing.F) {
	for _, s := range []string{
		`{"acks":[{"id":"01M8D4BDA300017P7MZZ5NX33N","lease":"e19ebaad1a36123267d5aed4"}]}`,
		`{"acks":[{"lease":"x","id":"01m8d4bda300017p7mzz5nx33n"} , {"id":"01M8D4BDA300017P7MZZ5NX33P","lease":""}]}`,
		` { "acks" : [ ] } `,
		`{"acks":null}`,
		`{"acks":[{"id":"01M8D4BDA300017P7MZZ5NX33N"}]}`,
		`{"acks":[{"id":"01M8D4BDA300017P7MZZ5NX33N","lease":"a","lease":"b"}]}`,
		`{"acks":[{"id":"nope","lease":"a"}]}`,
		`{"acks":[{"id":"01M8D4BDA300017P7MZZ5NX33N","lease":"\u00e9"}]}`,
		`{"acks":[{"id":"01M8D4BDA300017P7MZZ5NX33N","lease":"é","x":1}]}`,
		`{"acks":[],"acks":[]}`,
		`{"Acks":[]}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, ok := ackPlain(raw)
		if !ok {
			return
		}
		var req struct {
			Acks []ackManyItem `json:"acks"`
		}
		if err := decodeBytes(raw, &req); err != nil {
			t.Fatalf("ackPlain took %s, which decodeBytes refuses: %v", raw, err)
		}
		if req.Acks == nil || len(req.Acks) != len(fast) {
			t.Fatalf("%s: ackPlain read %d acks, decodeBytes %v", raw, len(fast), req.Acks)
		}
		for i, a := range req.Acks {
			id, err := task.ParseID(a.ID)
			if err != nil {
				t.Fatalf("%s: ackPlain took id %q, which does not parse: %v", raw, a.ID, err)
			}
			if want := (engine.AckParams{ID: id, Lease: a.Lease}); fast[i] != want {
				t.Fatalf("%s: ack %d: fast %+v, slow %+v", raw, i, fast[i], want)
			}
		}
	})
}

// TestAckPlainTakesClients: the body the Go client writes is read by hand
// (else the fast path is dead code).
func TestAckPlainTakesClients(t *testing.T) {
	id, err := task.ParseID("01M8D4BDA300017P7MZZ5NX33N")
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte(`{"acks":[{"id":"` + id.String() + `","lease":"0123abc"},{"id":"` + id.String() + `","lease":"x"}]}`)
	got, ok := ackPlain(raw)
	if !ok {
		t.Fatalf("ackPlain refused %s", raw)
	}
	want := []engine.AckParams{{ID: id, Lease: "0123abc"}, {ID: id, Lease: "x"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestWriteAckResults: the answer is what writeJSON wrote of
// {"results": results}, the items with an error as well.
func TestWriteAckResults(t *testing.T) {
	for _, results := range [][]ackManyResult{
		{{}},
		{{}, {Error: itemError(badField("acks.1.id", "is not a task id: %q", "<x>"))}, {}},
		{{Error: itemError(fmt.Errorf("ack task x: %w \u003c\u0026\u003e", store.ErrNotFound))}},
	} {
		fast := httptest.NewRecorder()
		writeAckResults(fast, results)
		slow := httptest.NewRecorder()
		writeJSON(slow, 200, map[string]any{"results": results})
		if fast.Body.String() != slow.Body.String() || fast.Code != slow.Code ||
			fast.Header().Get("Content-Type") != slow.Header().Get("Content-Type") {
			t.Fatalf("fast %d %q, slow %d %q", fast.Code, fast.Body, slow.Code, slow.Body)
		}
		var v struct{ Results []json.RawMessage }
		if err := json.Unmarshal(fast.Body.Bytes(), &v); err != nil || len(v.Results) != len(results) {
			t.Fatalf("%s: %v", fast.Body, err)
		}
	}
}
