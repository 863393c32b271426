package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hostileBodies are request bodies shaped to make a decoder do more than
// linear work: many members in one object (the headers map, an unknown
// object, a payload), deep nesting, many tasks. Each returns a batch body of
// about size bytes.
var hostileBodies = []struct {
	name string
	body func(size int) []byte
}{
	{"headers", func(size int) []byte {
		return batchOf(task1(`"target":{"http":{"url":"http://127.0.0.1:9/","headers":{` + members(size, `"h%d":"v"`) + `}}}`))
	}},
	{"retry", func(size int) []byte {
		return batchOf(task1(`"retry":{` + members(size, `"r%d":1`) + `}`))
	}},
	{"payload members", func(size int) []byte {
		return batchOf(task1(`"payload":{` + members(size, `"p%d":1`) + `}`))
	}},
	{"payload nesting", func(size int) []byte {
		n := min(size/2, 9000) // under the decoder's depth limit of 10000
		pad := strings.Repeat(" ", max(0, size-2*n))
		return batchOf(task1(`"payload":` + strings.Repeat("[", n) + strings.Repeat("]", n) + pad))
	}},
	{"many tasks", func(size int) []byte {
		one := task1(`"target":{"pull":{}}`)
		n := max(1, size/(len(one)+1))
		return batchOf(strings.TrimSuffix(strings.Repeat(one+",", n), ","))
	}},
}

// task1 is one batch item with extra fields.
func task1(extra string) string {
	return `{"app":"shop","key":"k","delay":"1h",` + extra + `}`
}

func batchOf(items string) []byte { return []byte(`{"tasks":[` + items + `]}`) }

// members returns comma-separated members made from format (with one %d)
// adding up to about size bytes.
func members(size int, format string) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, format, i)
	}
	return b.String()
}

// decodeBatch runs body through what POST /v1/tasks:batch does before the
// engine: decode the batch, then each item. It returns the first error.
func decodeBatch(h *Handler, body []byte) error {
	es, err := readBatchBytes(h, body, adminPrincipal, time.Now())
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.err != nil {
			return e.err
		}
	}
	return nil
}

// readBatchBytes is readBatch for a body in hand.
func readBatchBytes(h *Handler, body []byte, caller *principal, now time.Time) ([]batchEntry, error) {
	var req struct {
		Tasks []batchEntry `json:"tasks"`
	}
	if err := decodeReader(bytes.NewReader(body), &req, h.batchReader(caller, now, int64(len(body)))); err != nil {
		return nil, err
	}
	if req.Tasks == nil {
		return nil, badField("tasks", "is required")
	}
	return req.Tasks, nil
}

// TestDecodeCostIsLinear checks that no body costs more than linear time:
// the time per byte of a 2 MiB body of each hostile shape is within a
// loose factor of that of an 8 KiB one. Before the one-pass decoder, a
// 2.7 MB batch whose headers object had 200 000 members took 30 s (the
// repeated-name check compared every name with every other), which is
// hundreds of times the per-byte cost of a small body.
func TestDecodeCostIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("times decoding")
	}
	h := New(Config{})
	const small, large = 8 << 10, 2 << 20
	for _, c := range hostileBodies {
		t.Run(c.name, func(t *testing.T) {
			perByte := func(size int) float64 {
				body := c.body(size)
				best := time.Duration(1 << 62)
				for range 5 {
					start := time.Now()
					_ = decodeBatch(h, body)
					best = min(best, time.Since(start))
				}
				return float64(best) / float64(len(body))
			}
			s, l := perByte(small), perByte(large)
			t.Logf("%.1f ns/byte at 8 KiB, %.1f ns/byte at 2 MiB", s, l)
			// Linear work gives a ratio near 1 (caches and the garbage
			// collector move it a little); quadratic work gives about 256.
			if l > 10*s {
				t.Errorf("%.1f ns/byte at 2 MiB is %.0f× the %.1f ns/byte at 8 KiB: decoding is not linear", l, l/s, s)
			}
		})
	}
}

// TestHostileBatchRefused: the batch of the security report, one task whose
// headers object has 200 000 members (2.7 MB), is refused as too large
// before its task is decoded, and quickly (it took 30 s of CPU before); a
// task under the size cap with 10 000 headers is refused naming the field.
func TestHostileBatchRefused(t *testing.T) {
	h := New(Config{})
	for _, c := range []struct {
		size   int
		status int
		field  string
	}{
		{2700 << 10, http.StatusRequestEntityTooLarge, ""},
		{int(h.maxBody) - 1024, http.StatusBadRequest, "target.http.headers"},
	} {
		body := batchOf(task1(`"target":{"http":{"url":"http://127.0.0.1:9/","headers":{` + members(c.size, `"h%d":"v"`) + `}}}`))
		start := time.Now()
		err := decodeBatch(h, body)
		took := time.Since(start)
		status, _, field := statusOf(err)
		if status != c.status || field != c.field {
			t.Errorf("%d-byte batch: %d on %q (%v), want %d on %q", len(body), status, field, err, c.status, c.field)
		}
		if took > 5*time.Second { // loose: about 0.1 s here, 30 s before
			t.Errorf("refusing a %d-byte batch took %s", len(body), took)
		}
	}
}

// BenchmarkDecodeBatch reports the decoding throughput of each hostile
// shape from 1 KiB to the batch cap: MB/s stays flat when the cost is
// linear in the size.
//
//	go test -run '^$' -bench DecodeBatch ./internal/httpapi/
func BenchmarkDecodeBatch(b *testing.B) {
	h := New(Config{})
	for _, c := range hostileBodies {
		for _, size := range []int{1 << 10, 64 << 10, 1 << 20, int(h.maxBatch) - 64} {
			body := c.body(size)
			if len(body) > int(h.maxBatch) {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					_ = decodeBatch(h, body)
				}
			})
		}
	}
}
