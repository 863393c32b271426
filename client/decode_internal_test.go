package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// FuzzDecodeAnswers holds the hand-read answers (a claim's tasks, a
// minimal batch's results) to what encoding/json reads from the same bytes.
func FuzzDecodeAnswers(f *testing.F) {
	id := new(task.IDGenerator).New(time.Unix(1_700_000_000, 0), 3)
	tk := &task.Task{ID: id, App: "a", State: "scheduled", Attempts: 1, Lease: "l", Payload: []byte(`{"x":1}`),
		DueAt: time.Unix(1_700_000_000, 5).UTC(), Target: task.Target{Pull: &task.PullTarget{}}}
	tb, err := tk.MarshalJSON()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"tasks":[` + string(tb) + `,` + string(tb) + `]}`))
	f.Add([]byte(`{"tasks":[]}`))
	f.Add(append(tb, '\n'))
	f.Add(append(tb, '{', '}'))
	f.Add([]byte(` {"tasks":null} `))
	f.Add([]byte(`{"tasks":[null]}`))
	f.Add([]byte(`{"tasks":[],"tasks":[{}]}`))
	f.Add([]byte(`{"tasks":[]}{"tasks":[1]}`))
	f.Add([]byte(`{"results":[{"task":{"id":"` + id.String() + `"},"created":true},{"task":{"id":"` + id.String() + `"},"created":false}]}`))
	f.Add([]byte(`{"results":[]}`))
	f.Add([]byte(`{"results":[{"task":{"id":"` + id.String() + `"},"created":true}],"results":[]}`))
	f.Add([]byte(`{"results":[{"error":{"code":"invalid_field","message":"m","field":"tasks.0.app"}}]}`))
	f.Add([]byte(`{"results":[{"task":{"id":"0000000000000000000000000u"},"created":true}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fc, jc claimAnswer
		type plainClaim claimAnswer
		ef := fc.decodeBody(b)
		ej := json.NewDecoder(bytes.NewReader(b)).Decode((*plainClaim)(&jc))
		if (ef == nil) != (ej == nil) || !reflect.DeepEqual(fc, jc) {
			t.Fatalf("claim %s: %+v, %v; encoding/json %+v, %v", b, fc, ef, jc, ej)
		}
		// A task's answer is read whole: trailing data is an error, as
		// json.Unmarshal has it.
		var ft, jt task.Task
		ef = (*taskAnswer)(&ft).decodeBody(b)
		ej = json.Unmarshal(b, &jt)
		if (ef == nil) != (ej == nil) || (ef == nil && !reflect.DeepEqual(ft, jt)) {
			t.Fatalf("task %s: %+v, %v; encoding/json %+v, %v", b, ft, ef, jt, ej)
		}
		var fb, jb batchAnswer
		type plainBatch batchAnswer
		ef = fb.decodeBody(b)
		ej = json.NewDecoder(bytes.NewReader(b)).Decode((*plainBatch)(&jb))
		if (ef == nil) != (ej == nil) || !reflect.DeepEqual(fb, jb) {
			t.Fatalf("batch %s: %+v, %v; encoding/json %+v, %v", b, fb, ef, jb, ej)
		}
	})
}

// TestAnswersReadByHand: the answers the server writes take the hand path.
func TestAnswersReadByHand(t *testing.T) {
	id := new(task.IDGenerator).New(time.Unix(1_700_000_000, 0), 3)
	tb, err := (&task.Task{ID: id, App: "a", Target: task.Target{Pull: &task.PullTarget{}}}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if list, ok := member([]byte(`{"tasks":[`+string(tb)+`]}`), "tasks"); !ok {
		t.Fatal("claim answer not split")
	} else if ts, ok := task.DecodeList(list); !ok || len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("claim answer not read by hand: %v %v", ts, ok)
	}
	list, ok := member([]byte(`{"results":[{"task":{"id":"`+id.String()+`"},"created":false}]}`), "results")
	if !ok {
		t.Fatal("batch answer not split")
	}
	if rs, ok := minimalResults(list); !ok || len(rs) != 1 || rs[0].Task.ID != id || rs[0].Created {
		t.Fatalf("minimal batch answer not read by hand: %+v %v", rs, ok)
	}
}

// TestBatchBodyAsMarshal: the batch body built from each request's
// MarshalJSON is the bytes json.Marshal writes.
func TestBatchBodyAsMarshal(t *testing.T) {
	due := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	reqs := []ScheduleRequest{
		{App: "a<b>&", Key: "k\u2028", Delay: task.Duration(time.Second), Payload: json.RawMessage(` { "a" : "<&>\u2029" , "b": [1, 2] } `),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://h/x?a=1&b=<2>", Headers: map[string]string{"X": "y"}}}},
		{App: "b", DueAt: &due, PayloadBase64: []byte{0, 0xff}, Target: task.Target{Pull: &task.PullTarget{}},
			Retry: &task.RetryPolicy{MaxAttempts: 3}},
	}
	want, err := json.Marshal(struct {
		Tasks []ScheduleRequest `json:"tasks"`
	}{reqs})
	if err != nil {
		t.Fatal(err)
	}
	got, err := batchBody(reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("batch body\n%s\nwant\n%s", got, want)
	}
}
