package record

import (
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// FuzzDecode checks that Decode never panics, and that whatever it accepts,
// of either version, encodes and decodes back to the same task (see
// checkRedecode).
func FuzzDecode(f *testing.F) {
	var zero time.Time
	tasks := []*task.Task{
		{},
		typicalTask(),
		{App: "a", State: "odd", Target: task.Target{Pull: &task.PullTarget{}}, Deadline: &zero},
		{Target: task.Target{
			AMQP: &task.AMQPTarget{URL: "amqp://h", Exchange: "x", RoutingKey: "r"},
			NATS: &task.NATSTarget{URL: "nats://h", Subject: "s"},
		}, History: []task.Event{{What: "nothing known"}, {}}},
	}
	occ := typicalTask()
	occ.ScheduleID = goldenID
	tasks = append(tasks, fullTask(f), occ, &task.Task{ScheduleID: goldenID})
	for _, tk := range tasks {
		for _, enc := range encoders {
			b, err := enc.encode(tk)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, g := range goldenV1 {
		f.Add([]byte(g.record))
	}
	f.Add([]byte(goldenV2))
	f.Add([]byte("\x01{\"payload\":\"\",\"history\":[],\"target\":{\"http\":{\"headers\":{}}},\"due_at\":\"2026-01-01T00:00:00+01:00\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRedecode(t, b)
	})
}

// FuzzDecodeSchedule checks that DecodeSchedule never panics, and that
// whatever it accepts encodes and decodes back to the same schedule, and
// encodes the same again.
func FuzzDecodeSchedule(f *testing.F) {
	for _, s := range []*task.Schedule{{}, typicalSchedule(), fullSchedule(f)} {
		b, err := EncodeSchedule(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(goldenSchedule))
	f.Add([]byte("\x01{\"payload\":\"\",\"target\":{\"http\":{\"headers\":{}}},\"start_at_ms\":-62135596800000}"))
	f.Add([]byte("\x01{\"ID\":\"01KJX4Z6SV0000AW5Q1B7G3T4M\",\"wake_at_ms\":1e3}"))
	f.Add([]byte("\x01{} {}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScheduleRedecode(t, b)
	})
}
