package task_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// fuzzTask builds a task from the fuzzer's values: every field the JSON
// writes, each optional one set or not by a bit of mask.
func fuzzTask(mask uint32, s1, s2, s3, s4 string, payload []byte, ns, ns2 int64, zone int, n int) *task.Task {
	at := func(ns int64) time.Time {
		t := time.Unix(0, ns)
		if mask&(1<<26) != 0 {
			t = time.Unix(ns, 0) // seconds: years past 9999 and before 0
		}
		switch zone % 3 {
		case 0:
			return t.UTC()
		case 1:
			return t.In(time.FixedZone("z", zone%100000))
		}
		return t // local, with a monotonic-free wall time
	}
	bit := func(i uint) bool { return mask&(1<<i) != 0 }
	var id, sid task.ID
	copy(id[:], s1)
	copy(sid[:], s2)
	t := &task.Task{
		ID: id, App: s1, DueAt: at(ns), NextAttemptAt: at(ns2),
		State: task.State(s3), Attempts: n, CreatedAt: at(ns / 3), UpdatedAt: at(ns2 / 7),
		Payload: payload,
	}
	if bit(0) {
		t.Key = s2
	}
	if bit(1) {
		t.ScheduleID = sid
	}
	if bit(2) {
		d := at(ns + ns2)
		t.Deadline = &d
	}
	if bit(3) {
		h := &task.HTTPTarget{URL: s3}
		if bit(4) {
			h.Headers = map[string]string{s1: s2, s4: s3, "X-B": s4}
		}
		if bit(5) {
			h.Headers = map[string]string{}
		}
		if bit(6) {
			h.Timeout = task.Duration(ns2 % int64(time.Hour))
		}
		t.Target.HTTP = h
	}
	if bit(7) {
		t.Target.Pull = &task.PullTarget{}
	}
	if bit(8) {
		a := &task.AMQPTarget{}
		if bit(9) {
			a.URL = s4
		}
		if bit(10) {
			a.Exchange = s2
		}
		if bit(11) {
			a.RoutingKey = s1
		}
		t.Target.AMQP = a
	}
	if bit(12) {
		t.Target.NATS = &task.NATSTarget{Subject: s3}
		if bit(13) {
			t.Target.NATS.URL = s4
		}
	}
	if bit(14) {
		t.Retry.MaxAttempts = n * 3
	}
	if bit(15) {
		t.Retry.MinBackoff = task.Duration(ns % int64(time.Minute))
	}
	if bit(16) {
		t.Retry.MaxBackoff = task.Duration(-ns2)
	}
	if bit(17) {
		t.LastError = s4
	}
	if bit(18) {
		t.Lease = s2
	}
	if bit(19) {
		l := at(ns2 + 1)
		t.LeaseExpiresAt = &l
	}
	if bit(20) {
		f := at(ns - ns2)
		t.FinishedAt = &f
	}
	for i := range int(mask>>21) % 4 {
		t.Record(at(ns+int64(i)), s4, n*i, s1[:min(len(s1), i)])
	}
	if bit(23) {
		t.Trace = &task.TraceContext{Parent: s3}
		if bit(24) {
			t.Trace.State = s4
		}
	}
	if bit(25) {
		t.Payload = nil
	}
	return t
}

// FuzzAppendJSON holds the hand-written JSON of a task (json.go) to the
// bytes json.Marshal wrote before it, byte for byte, whatever the fields
// hold: escaping, invalid UTF-8, times in any zone or out of range, empty
// and nil maps and slices, payloads that are JSON with whitespace or HTML
// characters and payloads that are not.
func FuzzAppendJSON(f *testing.F) {
	f.Add(uint32(0), "billing", "order-42", "scheduled", "http://127.0.0.1:9/hook", []byte(`{"seq":1}`), int64(1_700_000_000_123_000_000), int64(1_700_000_000_123_000_000), 0, 0)
	const all = (1<<26 - 1) &^ (1 << 25) // every field, the payload kept, times in range
	f.Add(uint32(all), "a<b>&c", "k\u2028\u2029", "dead", "x\x00\x1f\x7f\"\\\b\f\n\r\t", []byte(" { \"a\" : [1, 2 ,\"<&>\u2028\"] } "), int64(-1), int64(1<<62), 1, 3)
	f.Add(uint32(all&^(1<<5)), "\xff\xfe", "é\xc3", "µs", "\xe2\x80", []byte("\xff not json"), int64(253402300799999999), int64(-62135596800000000), 2, -5)
	f.Add(uint32(0x2aaaaaa), "", "", "", "", []byte(`null`), int64(0), int64(999), 86399, 1<<40)
	f.Add(uint32(0x7555555), "app", "key", "dead", "err", []byte(`1`), int64(1<<40), int64(-(1 << 40)), 3, 1)
	f.Add(uint32(0x1555555), "app", "key", "delivering", "err", []byte(`"\u003c"`), int64(1e18), int64(-1e18), 37, 7)
	f.Fuzz(func(t *testing.T, mask uint32, s1, s2, s3, s4 string, payload []byte, ns, ns2 int64, zone, n int) {
		tk := fuzzTask(mask, s1, s2, s3, s4, payload, ns, ns2, zone, n)
		want, werr := tk.MarshalJSONReflect()
		got, gerr := tk.AppendJSON([]byte("prefix"))
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("errors differ: encoding/json %v, AppendJSON %v", werr, gerr)
		}
		if werr != nil {
			if string(got) != "prefix" {
				t.Fatalf("AppendJSON failed (%v) but appended %q", gerr, got)
			}
			return
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("AppendJSON differs from encoding/json:\n got %s\nwant %s", got[len("prefix"):], want)
		}
		m, err := tk.MarshalJSON()
		if err != nil || !bytes.Equal(m, want) {
			t.Fatalf("MarshalJSON = %s, %v; want %s", m, err, want)
		}
		// Inside another value encoding/json compacts it once more: no change.
		nested, err := json.Marshal(struct {
			T *task.Task `json:"t"`
		}{tk})
		if err != nil || !bytes.Equal(nested, append(append([]byte(`{"t":`), want...), '}')) {
			t.Fatalf("nested: %s, %v", nested, err)
		}
	})
}

// A created task as the API answers it (the bench's create request).
func benchTask() *task.Task {
	now := time.Date(2026, 11, 26, 8, 0, 0, 123_000_000, time.UTC)
	var g task.IDGenerator
	t := &task.Task{
		ID: g.New(now, 0), App: "bench", Key: "run-123456",
		DueAt: now.Add(24 * time.Hour), NextAttemptAt: now.Add(24 * time.Hour),
		Payload: []byte(`{"seq":123456}`),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:9/hook"}},
		Retry:   task.RetryPolicy{}.WithDefaults(),
		State:   task.Scheduled, CreatedAt: now, UpdatedAt: now,
	}
	t.Record(now, "created", 0, "")
	return t
}

// BenchmarkTaskJSON compares the hand-written JSON of a created task with
// encoding/json's.
//
//	go test -run '^$' -bench TaskJSON -benchmem ./task/
func BenchmarkTaskJSON(b *testing.B) {
	t := benchTask()
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = t.AppendJSON(buf[:0])
		}
	})
	b.Run("MarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = t.MarshalJSON()
		}
	})
	b.Run("encoding-json-reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = t.MarshalJSONReflect()
		}
	})
}
