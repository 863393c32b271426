package client

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// claimBody is the answer to a claim of n pull tasks, as the server
// writes it, and the tasks in it.
func claimBody(tb testing.TB, n int, app string) ([]byte, []*task.Task) {
	tb.Helper()
	var gen task.IDGenerator
	now := time.Unix(1_700_000_000, 0).UTC()
	ts := make([]*task.Task, n)
	b := []byte(`{"tasks":[`)
	for i := range ts {
		exp := now.Add(time.Minute)
		ts[i] = &task.Task{
			ID: gen.New(now, 0), App: app, Key: app + "-key", State: task.Delivering, Attempts: 1,
			Lease: app + "-lease", LeaseExpiresAt: &exp, Payload: []byte(`{"seq":12345,"app":"` + app + `"}`),
			DueAt: now, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now, Target: task.Target{Pull: &task.PullTarget{}},
			Retry:   task.RetryPolicy{}.WithDefaults(),
			History: []task.Event{{At: now, What: "created"}, {At: now, What: "attempt", Attempt: 1}},
		}
		if i > 0 {
			b = append(b, ',')
		}
		tj, err := ts[i].MarshalJSON()
		if err != nil {
			tb.Fatal(err)
		}
		b = append(b, tj...)
	}
	return append(b, `]}`...), ts
}

func answer(b []byte) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b))}
}

// TestDecodeAnswerKeepsNothingOfItsBuffer: the buffer an answer is read
// into goes back to answerBufs for the next answer, so nothing decoded
// may point into it: the tasks of a claim stay as they were after the
// buffer is written over.
func TestDecodeAnswerKeepsNothingOfItsBuffer(t *testing.T) {
	body, want := claimBody(t, 3, "billing")
	var got claimAnswer
	if err := decodeAnswer(answer(body), &got); err != nil {
		t.Fatal(err)
	}
	overwritten := false
	for range 100 { // a pool may drop what it is given (always may under -race)
		buf := answerBufs.Get().(*bytes.Buffer)
		if buf.Cap() >= len(body) {
			all := buf.Bytes()[:buf.Cap()]
			for i := range all {
				all[i] = 'x'
			}
			overwritten = true
			break
		}
		if err := decodeAnswer(answer(body), new(claimAnswer)); err != nil {
			t.Fatal(err)
		}
	}
	if !overwritten {
		t.Skip("the pool kept no buffer")
	}
	for i := range want {
		want[i].Lease, want[i].Key = "billing-lease", "billing-key"
		if !reflect.DeepEqual(got.Tasks[i].Payload, want[i].Payload) || got.Tasks[i].App != want[i].App ||
			got.Tasks[i].Lease != want[i].Lease || got.Tasks[i].Key != want[i].Key || got.Tasks[i].History[1].What != "attempt" {
			t.Errorf("task %d after its answer's buffer was written over: %+v, want %+v", i, got.Tasks[i], want[i])
		}
	}
}

// BenchmarkDecodeClaimAnswer: a pull consumer reading a claim's answer of
// 1000 tasks (toc bench's consumers), per task.
func BenchmarkDecodeClaimAnswer(b *testing.B) {
	body, _ := claimBody(b, 1000, "bench")
	b.ReportAllocs()
	for b.Loop() {
		var a claimAnswer
		if err := decodeAnswer(answer(body), &a); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/task")
}
