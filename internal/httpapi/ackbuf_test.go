package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// TestAckBodyBufferKept: the buffer a full tasks:ack body (MaxClaim acks)
// is read into goes back to the pool for the next request, as a smaller
// body's does; one left to the collector made each ack request grow its
// buffer again from 1 KB.
func TestAckBodyBufferKept(t *testing.T) {
	var gen task.IDGenerator
	var req struct {
		Acks []ackManyItem `json:"acks"`
	}
	for range engine.MaxClaim {
		req.Acks = append(req.Acks, ackManyItem{ID: gen.New(time.Now(), 0).String(), Lease: strings.Repeat("0123456789abcdef", 2)[:24]})
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := readAll(bytes.NewReader(body), make([]byte, 0, 1024))
	if err != nil || !bytes.Equal(raw, body) {
		t.Fatalf("readAll = %d bytes, %v; want the %d of the body", len(raw), err, len(body))
	}
	if !keepBuf(cap(raw)) {
		t.Errorf("the buffer of a %d-byte ack body (capacity %d) is not kept for the next request", len(body), cap(raw))
	}
}
