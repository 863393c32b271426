package client

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// reflectJSON is the create body as MarshalJSON wrote it with
// encoding/json's reflection, before it was written by hand.
func reflectJSON(r ScheduleRequest) ([]byte, error) {
	type plain ScheduleRequest // its fields, not the method
	w := struct {
		plain
		Delay *task.Duration `json:"delay,omitempty"` // hides plain's
	}{plain: plain(r)}
	if r.DueAt == nil || r.Delay != 0 {
		w.Delay = &r.Delay
	}
	return json.Marshal(w)
}

// checkSameJSON fails unless MarshalJSON and reflectJSON agree on r:
// the same bytes, or both an error.
func checkSameJSON(t *testing.T, r ScheduleRequest) {
	t.Helper()
	want, wantErr := reflectJSON(r)
	got, err := r.MarshalJSON()
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("MarshalJSON(%+v) = %s, %v;\nencoding/json: %s, %v", r, got, err, want, wantErr)
	}
}

func TestScheduleRequestJSON(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []ScheduleRequest{
		{},
		{App: "a"},
		{App: "billing", Key: "order-1", DueAt: &due, Payload: json.RawMessage(`{"seq":1}`),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:9/hook"}}},
		{App: "a<b>&\"\\\n\u2028é", Key: "k\x00\xff", Delay: task.Duration(90 * time.Second),
			Payload: json.RawMessage(" {\"a\" : [1, \"<\u2029>\"] }\n"), Deadline: &due,
			Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://x/?a=1&b=<", Headers: map[string]string{"B": "2", "A": "1"}, Timeout: task.Duration(time.Second)}},
			Retry:  &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(time.Millisecond)}},
		{App: "a", PayloadBase64: []byte{0, 1, 0xff}, Target: task.Target{Pull: &task.PullTarget{}}, Delay: 1},
		{App: "a", Target: task.Target{NATS: &task.NATSTarget{Subject: "s"}, AMQP: &task.AMQPTarget{Exchange: "e"}}, Retry: &task.RetryPolicy{}},
		{App: "a", Payload: json.RawMessage(`{not json`)},
		{App: "a", Payload: json.RawMessage(`"\xff"`)},
		{App: "a", DueAt: &far},
	} {
		checkSameJSON(t, r)
	}
}

// FuzzScheduleRequestJSON holds the hand-written create body to what
// encoding/json writes for the same request.
func FuzzScheduleRequestJSON(f *testing.F) {
	f.Add("bench", "run-1", int64(1764170000123), int64(0), []byte(`{"seq":1}`), []byte(nil), "http://127.0.0.1:9/hook", int64(0), false)
	f.Add("a<&>", "k\u2028", int64(-1), int64(1500), []byte(" [1, 2]"), []byte{1, 2}, "", int64(5), true)
	f.Fuzz(func(t *testing.T, app, key string, dueMs, delay int64, payload, b64 []byte, url string, timeout int64, retry bool) {
		r := ScheduleRequest{App: app, Key: key, Delay: task.Duration(delay), Payload: payload, PayloadBase64: b64}
		if dueMs >= 0 {
			due := time.UnixMilli(dueMs)
			r.DueAt = &due
		}
		if url != "" {
			r.Target.HTTP = &task.HTTPTarget{URL: url, Timeout: task.Duration(timeout)}
		} else {
			r.Target.Pull = &task.PullTarget{}
		}
		if retry {
			r.Retry = &task.RetryPolicy{MaxAttempts: int(timeout), MaxBackoff: task.Duration(delay)}
		}
		checkSameJSON(t, r)
	})
}
