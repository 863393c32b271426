package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"

	"github.com/toc-dev/toc/internal/httpapi"
)

// TestRefusedBatchesCostNoMemory is issue 21's finding 3: 32 concurrent
// batches of 510 tasks with 64 KiB payloads (32 MiB each), all naming an
// app the token does not reach, grew the server's RSS to 3.97 GB. Every
// body was read whole, then each item copied out of it, then decoded,
// before the token's right to the item's app was checked.
//
// Now a batch is decoded as it streams in and each item's app is checked
// before anything of it is kept. The test measures the bytes the process
// allocates while it serves the batches (the runtime's cumulative
// /gc/heap/allocs:bytes): the heap in use can never grow by more than what
// was allocated, and unlike RSS or a sampled heap figure the count does not
// depend on when the collector ran. The bodies are built before the count
// starts. The old code allocated at least 64 MiB per batch (the body read
// whole, and each item copied out of it); the bound is 8 MiB per batch.
// The body budget is set out of the way here (every batch is let in at
// once), so that the bound is the decoding's alone.
//
// Not parallel: the allocations of other tests would be counted. Under the
// race detector, which makes decoding 20 times slower, 4 batches are sent
// instead of 32 (the bound is per batch).
func TestRefusedBatchesCostNoMemory(t *testing.T) {
	const (
		items    = 510
		perBatch = 8 << 20 // the bound, in bytes allocated per batch
	)
	batches := 32
	if raceEnabled {
		batches = 4
	}
	s := startServer(t, "", nil)
	acc, err := httpapi.NewAccess(nil, map[string][]string{"shop": {digest("shop-token")}, "bank": {digest("bank-token")}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, Access: acc, MaxBodyMemory: int64(2*batches) << 25}))
	t.Cleanup(hs.Close)

	payload := strings.Repeat("x", 64<<10-2) // a JSON string of 64 KiB
	var b bytes.Buffer
	b.WriteString(`{"tasks":[`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"payload":"` + payload + `","app":"bank","delay":"1h","target":{"pull":{}}}`)
	}
	b.WriteString(`]}`)
	body := b.Bytes()
	if len(body) < 32<<20-1<<20 || len(body) > 32<<20 {
		t.Fatalf("body is %d bytes, want about 32 MiB", len(body))
	}

	runtime.GC()
	before := heapStats()
	var wg sync.WaitGroup
	errs := make(chan string, batches)
	for range batches {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", hs.URL+"/v1/tasks:batch", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer shop-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var out struct {
				Results []struct {
					Error struct{ Code string } `json:"error"`
				} `json:"results"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Results) != items {
				errs <- resp.Status
				return
			}
			for _, r := range out.Results {
				if r.Error.Code != "forbidden" {
					errs <- "an item answered " + r.Error.Code + ", want forbidden"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	after := heapStats()
	allocated := after.allocs - before.allocs
	t.Logf("%d batches of %.1f MiB: %.1f MiB allocated (%.2f MiB a batch), heap %.1f → %.1f MiB",
		batches, mib(uint64(len(body))), mib(allocated), mib(allocated)/float64(batches), mib(before.heap), mib(after.heap))
	if allocated > uint64(batches*perBatch) {
		t.Errorf("serving %d refused batches allocated %.0f MiB, want at most %d MiB (%d MiB a batch)",
			batches, mib(allocated), batches*perBatch>>20, perBatch>>20)
	}
	// Memory returns to its level: nothing of the load is kept.
	runtime.GC()
	if live := heapStats().heap; live > before.heap+32<<20 {
		t.Errorf("live heap after the load %.0f MiB, before %.0f MiB: the load left more than 32 MiB behind", mib(live), mib(before.heap))
	}
}

type heapFigures struct{ allocs, heap uint64 }

// heapStats reads the bytes allocated since the start and the heap's live
// objects.
func heapStats() heapFigures {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return heapFigures{allocs: s[0].Value.Uint64(), heap: s[1].Value.Uint64()}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
