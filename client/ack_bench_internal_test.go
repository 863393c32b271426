package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toc-dev/toc/task"
)

// BenchmarkAckMany encodes a body of 1000 acks and reads the answer that
// all were delivered: by hand and with encoding/json.
func BenchmarkAckMany(b *testing.B) {
	id, _ := task.ParseID("01M8D4BDA300017P7MZZ5NX33N")
	acks := make([]AckItem, 1000)
	for i := range acks {
		acks[i] = AckItem{ID: id, Lease: "e19ebaad1a36123267d5aed4"}
	}
	answer := []byte(`{"results":[` + strings.Repeat(`{},`, 999) + "{}]}\n")
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = appendAcks(nil, acks)
			var a ackAnswer
			if err := a.decodeBody(answer); err != nil || len(a.Results) != 1000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(struct {
				Acks []AckItem `json:"acks"`
			}{acks}); err != nil {
				b.Fatal(err)
			}
			type plain ackAnswer
			var a plain
			if err := json.NewDecoder(bytes.NewReader(answer)).Decode(&a); err != nil || len(a.Results) != 1000 {
				b.Fatal(err)
			}
		}
	})
}
