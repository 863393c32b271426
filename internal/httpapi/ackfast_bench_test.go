package httpapi

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// ackBody is a tasks:ack body of n acks as the Go client writes it.
func ackBody(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"acks":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"01M8D4BDA300017P7MZZ5N%04d","lease":"e19ebaad1a36123267d5%04d"}`, i, i)
	}
	sb.WriteString("]}")
	return []byte(sb.String())
}

// BenchmarkAckBody reads a body of 1000 acks (per op: the body): by hand
// (plain) and through the decoder and the handler's loop (decoder).
func BenchmarkAckBody(b *testing.B) {
	raw := ackBody(1000)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := ackPlain(raw); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req struct {
				Acks []ackManyItem `json:"acks"`
			}
			if err := decodeBytes(raw, &req); err != nil {
				b.Fatal(err)
			}
			acks := make([]engine.AckParams, 0, len(req.Acks))
			for _, a := range req.Acks {
				id, err := task.ParseID(a.ID)
				if err != nil {
					b.Fatal(err)
				}
				acks = append(acks, engine.AckParams{ID: id, Lease: a.Lease})
			}
		}
	})
}

// BenchmarkAckResults writes the answer of 1000 acks delivered.
func BenchmarkAckResults(b *testing.B) {
	results := make([]ackManyResult, 1000)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeAckResults(httptest.NewRecorder(), results)
		}
	})
	b.Run("writeJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeJSON(httptest.NewRecorder(), 200, map[string]any{"results": results})
		}
	})
}
