package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/task"
)

// encodeV1 is the Encode of earlier releases, which wrote version 1: JSON.
// It is kept to check that their records still read back.
func encodeV1(t *task.Task) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(versionJSON)
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(jsonRecord{taskFields: taskFields(*t), Payload: t.Payload, WakeAt: t.WakeAt, Trace: t.Trace}); err != nil {
		return nil, fmt.Errorf("toc: encode task %s: %w", t.ID, err)
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode ends with a newline
}

// encoders are the two versions' writers.
var encoders = []struct {
	name   string
	encode func(*task.Task) ([]byte, error)
}{
	{"v1", encodeV1},
	{"v2", Encode},
}

// roundTrip encodes t with encode and decodes it back.
func roundTrip(t *testing.T, encode func(*task.Task) ([]byte, error), tk *task.Task) *task.Task {
	t.Helper()
	b, err := encode(tk)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(%q): %v", b, err)
	}
	return got
}

// checkEqual fails unless got is deeply equal to want. (cmp.Diff alone would
// let times in different locations pass, through time.Time.Equal.)
func checkEqual(t *testing.T, want, got *task.Task) {
	t.Helper()
	if reflect.DeepEqual(want, got) {
		return
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("round trip differs (-want +got):\n%s", diff)
	} else {
		t.Errorf("round trip differs (in a location?):\nwant %#v\ngot  %#v", want, got)
	}
}

var timeType = reflect.TypeFor[time.Time]()

// fill sets every field under v to a value that is not zero, recursively:
// pointers get a value, slices and maps two entries, times a sub-millisecond
// part. n counts the values set, to make them differ. It fails on a kind it
// does not know, so that a new kind of field gets noticed here.
func fill(t testing.TB, v reflect.Value, path string, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("%s #%d, ünïcode", path, *n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n) * 1_000_003 * int64(1-2*(*n%2))) // both signs
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n)*37 + 1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Array:
		for i := range v.Len() {
			fill(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.Set(reflect.ValueOf([]byte{0, 0xFF, '"', byte(*n)}).Convert(v.Type()))
			return
		}
		for i := range v.Len() {
			fill(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, k, fmt.Sprintf("%s key %d", path, i), n)
			fill(t, e, fmt.Sprintf("%s[%v]", path, k), n)
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path, n)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Unix(1_767_225_600+int64(*n)*86_399, int64(*n)*123_456_789%1e9).UTC()))
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				t.Fatalf("fill: %s.%s is unexported; teach the test (and the codec) about it", path, f.Name)
			}
			fill(t, v.Field(i), path+"."+f.Name, n)
		}
	default:
		t.Fatalf("fill: %s is of kind %s; teach the test (and the codec) about it", path, v.Kind())
	}
}

// fullTask returns a task with every field, and every field of its fields,
// set.
func fullTask(t testing.TB) *task.Task {
	var tk task.Task
	n := 0
	fill(t, reflect.ValueOf(&tk).Elem(), "task", &n)
	return &tk
}

// TestRoundTripEveryField fills every field of a task, however deep, and
// checks that it survives a record of either version. A field added to Task
// (or to what it holds) that the codec does not carry makes it fail.
func TestRoundTripEveryField(t *testing.T) {
	full := fullTask(t)
	for _, enc := range encoders {
		t.Run(enc.name, func(t *testing.T) {
			checkEqual(t, full, roundTrip(t, enc.encode, full))
		})
	}
	if b, _ := Encode(full); cap(b) != maxSize(full) {
		t.Errorf("Encode grew its buffer: maxSize = %d, record is %d bytes", maxSize(full), len(b))
	}
}

// TestRoundTripEachField sets one of Task's fields at a time, so that a
// field whose presence the codec gets wrong cannot hide behind the others.
func TestRoundTripEachField(t *testing.T) {
	full := reflect.ValueOf(fullTask(t)).Elem()
	for i := range full.NumField() {
		name := full.Type().Field(i).Name
		if name == "Seq" {
			continue // never stored (see fullTask)
		}
		t.Run(name, func(t *testing.T) {
			var tk task.Task
			reflect.ValueOf(&tk).Elem().Field(i).Set(full.Field(i))
			for _, enc := range encoders {
				checkEqual(t, &tk, roundTrip(t, enc.encode, &tk))
			}
		})
	}
	// And each kind of target on its own.
	for _, target := range []task.Target{
		{HTTP: &task.HTTPTarget{URL: "https://x/y"}},
		{HTTP: &task.HTTPTarget{Headers: map[string]string{"": ""}}},
		{Pull: &task.PullTarget{}},
		{AMQP: &task.AMQPTarget{RoutingKey: "r"}},
		{NATS: &task.NATSTarget{Subject: "s"}},
	} {
		tk := &task.Task{Target: target}
		for _, enc := range encoders {
			checkEqual(t, tk, roundTrip(t, enc.encode, tk))
		}
	}
}

// TestZeroAndEmpty pins what comes back for zero and empty values, the
// same for both versions: empty payloads, header maps and histories come
// back nil (version 1's omitempty), and a pointer to a zero value stays a
// pointer.
func TestZeroAndEmpty(t *testing.T) {
	var zero time.Time
	for _, tc := range []struct {
		name     string
		in, want *task.Task
	}{
		{"zero task", &task.Task{}, &task.Task{}},
		{"empty payload", &task.Task{Payload: []byte{}}, &task.Task{}},
		{"empty history", &task.Task{History: []task.Event{}}, &task.Task{}},
		{
			"empty headers",
			&task.Task{Target: task.Target{HTTP: &task.HTTPTarget{Headers: map[string]string{}}}},
			&task.Task{Target: task.Target{HTTP: &task.HTTPTarget{}}},
		},
		{
			"empty targets",
			&task.Task{Target: task.Target{HTTP: &task.HTTPTarget{}, Pull: &task.PullTarget{}, AMQP: &task.AMQPTarget{}, NATS: &task.NATSTarget{}}},
			&task.Task{Target: task.Target{HTTP: &task.HTTPTarget{}, Pull: &task.PullTarget{}, AMQP: &task.AMQPTarget{}, NATS: &task.NATSTarget{}}},
		},
		{
			"pointers to zero times",
			&task.Task{Deadline: &zero, LeaseExpiresAt: &zero, FinishedAt: &zero},
			&task.Task{Deadline: &zero, LeaseExpiresAt: &zero, FinishedAt: &zero},
		},
		{"zero event", &task.Task{History: []task.Event{{}}}, &task.Task{History: []task.Event{{}}}},
		{"empty header", &task.Task{Target: task.Target{HTTP: &task.HTTPTarget{Headers: map[string]string{"": ""}}}}, &task.Task{Target: task.Target{HTTP: &task.HTTPTarget{Headers: map[string]string{"": ""}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, enc := range encoders {
				checkEqual(t, tc.want, roundTrip(t, enc.encode, tc.in))
			}
		})
	}
}

// TestTimes checks that times come back exactly, as the same instant in UTC
// without a monotonic reading, from either version.
func TestTimes(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		paris = time.FixedZone("CET", 3600)
	}
	for _, at := range []time.Time{
		{},
		time.Unix(0, 0),
		time.Unix(0, 1),
		time.Unix(-1, 999_999_999),        // just before 1970
		time.Unix(-1, 0),                  // a whole second before 1970
		time.Unix(-1, 999_000_000),        // a whole millisecond before 1970
		time.UnixMilli(1_767_225_600_123), // what the engine keeps
		time.Unix(1_767_225_600, 123_456_789),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Now(), // with a monotonic reading
		time.Date(2026, 7, 1, 12, 0, 0, 5, paris),
	} {
		want := &task.Task{DueAt: at.UTC().Round(0), Deadline: new(at.UTC().Round(0)), History: []task.Event{{At: at.UTC().Round(0)}}}
		for _, enc := range encoders {
			got := roundTrip(t, enc.encode, &task.Task{DueAt: at, Deadline: &at, History: []task.Event{{At: at}}})
			Normalize(got) // version 1 keeps the location; version 2 does not need this
			checkEqual(t, want, got)
		}
		got := roundTrip(t, Encode, &task.Task{DueAt: at, Deadline: &at, History: []task.Event{{At: at}}})
		checkEqual(t, want, got)
	}

	// Version 2 holds times version 1 could not (years 0 to 9999 only), up
	// to ±maxUnixSec; past that Encode fails, naming the field.
	for _, at := range []time.Time{
		time.Date(-1, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-maxUnixSec, 0).UTC(),
		time.Unix(maxUnixSec, 999_999_999).UTC(),
	} {
		want := &task.Task{WakeAt: at}
		checkEqual(t, want, roundTrip(t, Encode, want))
	}
	for _, at := range []time.Time{
		time.Unix(-maxUnixSec-1, 999_999_999),
		time.Unix(maxUnixSec+1, 0),
		time.Unix(1<<62, 0),
		time.Unix(-1<<62, 0),
	} {
		tk := &task.Task{History: []task.Event{{}, {At: at}}}
		if b, err := Encode(tk); err == nil || !strings.Contains(err.Error(), "history[1].at") {
			t.Errorf("Encode of a task with history[1].at %v = %q, %v; want an error naming the field", at, b, err)
		}
		dst := []byte("prefix")
		if b, err := AppendEncode(dst, &task.Task{UpdatedAt: at}); err == nil || string(b) != "prefix" {
			t.Errorf("AppendEncode of a task updated at %v = %q, %v; want an error and dst", at, b, err)
		}
	}
}

// goldenV1 are records written by the last release that wrote version 1,
// with the tasks they hold.
var goldenV1 = []struct {
	record string
	task   func() *task.Task
}{
	{
		"\x01{\"id\":\"01KJX4Z6SV0000AW5Q1B7G3T4M\",\"app\":\"billing\",\"key\":\"invoice-42\",\"due_at\":\"2026-03-04T05:06:07.891Z\",\"next_attempt_at\":\"2026-03-04T05:06:08.891Z\",\"deadline\":\"2026-03-04T05:07:37.891Z\",\"target\":{\"http\":{\"url\":\"https://example.com/hook\",\"headers\":{\"Authorization\":\"Bearer t\",\"X-A\":\"1\"},\"timeout\":\"5s\"}},\"retry\":{\"max_attempts\":5,\"min_backoff\":\"1s\",\"max_backoff\":\"1m0s\"},\"state\":\"delivering\",\"attempts\":2,\"last_error\":\"503 Service Unavailable\",\"lease\":\"l-1\",\"lease_expires_at\":\"2026-03-04T05:07:37.891Z\",\"created_at\":\"2026-03-04T04:06:07.891Z\",\"updated_at\":\"2026-03-04T05:06:08.014456789Z\",\"history\":[{\"at\":\"2026-03-04T04:06:07.891Z\",\"what\":\"created\"},{\"at\":\"2026-03-04T05:06:07.891Z\",\"what\":\"failed\",\"attempt\":1,\"error\":\"503 Service Unavailable\"}],\"payload\":\"eyJpbnZvaWNlIjo0Mn0=\",\"wake_at\":\"2026-03-04T05:07:37.891Z\"}",
		func() *task.Task {
			at := time.Date(2026, 3, 4, 5, 6, 7, 891e6, time.UTC)
			later := at.Add(90 * time.Second)
			return &task.Task{
				ID: goldenID, App: "billing", Key: "invoice-42",
				DueAt: at, NextAttemptAt: at.Add(time.Second), Deadline: &later,
				Payload: []byte(`{"invoice":42}`),
				Target: task.Target{HTTP: &task.HTTPTarget{
					URL:     "https://example.com/hook",
					Headers: map[string]string{"X-A": "1", "Authorization": "Bearer t"},
					Timeout: task.Duration(5 * time.Second),
				}},
				Retry:          task.RetryPolicy{MaxAttempts: 5, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Minute)},
				State:          task.Delivering,
				Attempts:       2,
				LastError:      "503 Service Unavailable",
				Lease:          "l-1",
				LeaseExpiresAt: new(later),
				CreatedAt:      at.Add(-time.Hour),
				UpdatedAt:      at.Add(123456789),
				History: []task.Event{
					{At: at.Add(-time.Hour), What: "created"},
					{At: at, What: "failed", Attempt: 1, Error: "503 Service Unavailable"},
				},
				WakeAt: later,
			}
		},
	},
	{
		"\x01{\"id\":\"01KJX4Z6SV0000AW5Q1B7G3T4M\",\"app\":\"a\",\"due_at\":\"2026-03-04T05:06:07.891Z\",\"next_attempt_at\":\"2026-03-04T05:06:07.891Z\",\"target\":{\"pull\":{}},\"retry\":{},\"state\":\"delivered\",\"attempts\":1,\"created_at\":\"2026-03-04T05:06:07.891Z\",\"updated_at\":\"2026-03-04T05:06:07.891Z\",\"finished_at\":\"2026-03-04T05:06:07.891Z\"}",
		func() *task.Task {
			at := time.Date(2026, 3, 4, 5, 6, 7, 891e6, time.UTC)
			return &task.Task{
				ID: goldenID, App: "a", DueAt: at, NextAttemptAt: at,
				Target: task.Target{Pull: &task.PullTarget{}},
				State:  task.Delivered, Attempts: 1,
				CreatedAt: at, UpdatedAt: at, FinishedAt: &at,
			}
		},
	},
}

var goldenID = func() task.ID {
	id, err := task.ParseID("01KJX4Z6SV0000AW5Q1B7G3T4M")
	if err != nil {
		panic(err)
	}
	return id
}()

// TestVersion1 checks that records of earlier releases read back as they
// did, and as the same task does from version 2.
func TestVersion1(t *testing.T) {
	for i, g := range goldenV1 {
		want := g.task()
		got, err := Decode([]byte(g.record))
		if err != nil {
			t.Fatalf("golden %d: %v", i, err)
		}
		checkEqual(t, want, got)
		if b, err := encodeV1(want); err != nil || string(b) != g.record {
			t.Errorf("golden %d: encodeV1 no longer writes what the last release wrote:\n%q, %v", i, b, err)
		}
		checkEqual(t, want, roundTrip(t, Encode, got))
	}
}

// goldenV2 is typicalTask's record as written by the releases before
// Task.ScheduleID (bit 19): it must still read, with a zero ScheduleID, and
// a task without a ScheduleID must still encode to it, so that the records
// of tasks made on their own did not change.
const goldenV2 = "\x02\xff\x9d\x1bdxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\x01\x9c\xbaO\x9b;\x00\x00\x05p\xb7\n\xcf\x01\xe8\x94\abilling\ninvoice-42̬\xd3\xe7\xad\xce\x01\xec\xcb\xd3\xe7\xad\xce\x01\x8c\xa9\xe9\xe7\xad\xce\x01\x01\a!https://example.com/hooks/invoice\x03\rAuthorization\rBearer abcdef\fContent-Type\x10application/json\bX-Tenant\x04acme\x80ȯ\xa0%\x01\x02\x17503 Service Unavailable̸\xe4\xe0\xad\xce\x01̬\xd3\xe7\xad\xce\x01\x02\x03̸\xe4\xe0\xad\xce\x01\r\x0f̬\xd3\xe7\xad\xce\x01\x11\x02\x17503 Service Unavailable\xec\xcb\xd3\xe7\xad\xce\x01"

// TestScheduleID checks the field added to version 2 records: a record
// written before it decodes with a zero ScheduleID and encodes to the same
// bytes, and one with it round-trips and is longer by the field only.
func TestScheduleID(t *testing.T) {
	got, err := Decode([]byte(goldenV2))
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, typicalTask(), got)
	if !got.ScheduleID.IsZero() {
		t.Errorf("ScheduleID of an old record = %s, want zero", got.ScheduleID)
	}
	if b, err := Encode(typicalTask()); err != nil || string(b) != goldenV2 {
		t.Errorf("Encode of a task without a ScheduleID no longer writes the old record:\n%q, %v", b, err)
	}

	occ := typicalTask()
	occ.ScheduleID = goldenID.WithShard(7)
	b, err := Encode(occ)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, occ, roundTrip(t, Encode, occ))
	checkEqual(t, occ, roundTrip(t, encodeV1, occ))
	if len(b) != len(goldenV2)+len(occ.ScheduleID) { // bit 19 fits the mask's 3 bytes
		t.Errorf("record with a ScheduleID is %d bytes, want %d", len(b), len(goldenV2)+len(occ.ScheduleID))
	}
	// A version 1 record of an earlier release (no schedule_id) reads with
	// a zero ScheduleID.
	v1, err := Decode([]byte(goldenV1[0].record))
	if err != nil || !v1.ScheduleID.IsZero() {
		t.Errorf("version 1 record: ScheduleID %v, %v", v1.ScheduleID, err)
	}
}

// TestTraceContext checks the fields added to version 2 records with
// tracing: a record written before them (goldenV2, version 1) decodes with
// none, a task without them still encodes to the old bytes, and one with
// them round-trips.
func TestTraceContext(t *testing.T) {
	got, err := Decode([]byte(goldenV2))
	if err != nil {
		t.Fatal(err)
	}
	if got.Trace != nil {
		t.Errorf("trace context of an old record = %+v, want none", got.Trace)
	}
	if v1, err := Decode([]byte(goldenV1[0].record)); err != nil || v1.Trace != nil {
		t.Errorf("version 1 record: Trace %+v, %v", v1.Trace, err)
	}
	traced := typicalTask()
	traced.Trace = &task.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}
	checkEqual(t, traced, roundTrip(t, Encode, traced))
	checkEqual(t, traced, roundTrip(t, encodeV1, traced))
	b, err := Encode(traced)
	if err != nil {
		t.Fatal(err)
	}
	// Two lengths, and bit 21 takes a fourth byte of the mask.
	if want := len(goldenV2) + 3 + len(traced.Trace.Parent) + len(traced.Trace.State); len(b) != want {
		t.Errorf("record with a trace context is %d bytes, want %d", len(b), want)
	}
}

// typicalTask is a task as the engine keeps it while it retries an HTTP
// delivery: a 100-byte payload, a few headers, two events.
func typicalTask() *task.Task {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891e6, time.UTC)
	later := at.Add(90 * time.Second)
	return &task.Task{
		ID:            goldenID,
		App:           "billing",
		Key:           "invoice-42",
		DueAt:         at,
		NextAttemptAt: at.Add(time.Second),
		Deadline:      &later,
		Payload:       bytes.Repeat([]byte("x"), 100),
		Target: task.Target{HTTP: &task.HTTPTarget{
			URL:     "https://example.com/hooks/invoice",
			Headers: map[string]string{"Authorization": "Bearer abcdef", "Content-Type": "application/json", "X-Tenant": "acme"},
			Timeout: task.Duration(5 * time.Second),
		}},
		State:     task.Scheduled,
		Attempts:  1,
		LastError: "503 Service Unavailable",
		CreatedAt: at.Add(-time.Hour),
		UpdatedAt: at,
		History: []task.Event{
			{At: at.Add(-time.Hour), What: "created"},
			{At: at, What: "failed", Attempt: 1, Error: "503 Service Unavailable"},
		},
		WakeAt: at.Add(time.Second),
	}
}

// TestMalformed checks that Decode refuses damaged records, naming what it
// could not read, and never panics.
func TestMalformed(t *testing.T) {
	for _, tk := range []*task.Task{typicalTask(), fullTask(t)} {
		b, err := Encode(tk)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(b) {
			if got, err := Decode(b[:n]); err == nil {
				t.Errorf("Decode of the first %d of %d bytes = %#v, nil", n, len(b), got)
			}
		}
		if _, err := Decode(append(b[:len(b):len(b)], 0)); err == nil || !strings.Contains(err.Error(), "after the last field") {
			t.Errorf("Decode with a byte after the record: %v", err)
		}
		// Damage each byte: whatever decodes must survive another round.
		for i := range b {
			for _, x := range []byte{0x00, 0x01, 0x7F, 0x80, 0xFF} {
				c := bytes.Clone(b)
				c[i] ^= x
				checkRedecode(t, c)
			}
		}
	}

	uv := func(prefix []byte, xs ...uint64) []byte {
		for _, x := range xs {
			prefix = binary.AppendUvarint(prefix, x)
		}
		return prefix
	}
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{nil, "unknown version"},
		{[]byte{0}, "unknown version"},
		{[]byte{3}, "unknown version"},
		{[]byte{versionJSON}, "decode task record"},
		{[]byte{Version}, "task: truncated"},
		{uv([]byte{Version}, 1<<numTaskFields), "task: fields unknown"},
		{uv([]byte{Version}, 1<<63), "task: fields unknown"},
		{uv([]byte{Version}, 1<<fPayload, 2), "payload: truncated"},
		{uv([]byte{Version}, 1<<fPayload, 1<<62, 0), "payload: truncated"},
		{uv([]byte{Version}, 1<<fID, 0), "id: truncated"},
		{uv([]byte{Version}, 1<<fScheduleID, 0), "schedule_id: truncated"},
		{uv([]byte{Version}, 1<<fState, uint64(len(symbols))<<1|1), "state: out of range"},
		{uv([]byte{Version}, 1<<fState, 6<<1, 'a'), "state: truncated"},
		{uv([]byte{Version}, 1<<fDueAt, 1, 1e6), "due_at: out of range"},
		{uv([]byte{Version}, 1<<fDueAt, zigzag(maxUnixSec*1e3+1000)<<1), "due_at: out of range"},
		{uv([]byte{Version}, 1<<fDueAt, zigzag(-maxUnixSec*1e3-1)<<1), "due_at: out of range"},
		{uv([]byte{Version}, 1<<fDueAt, 1<<63), "due_at: out of range"},
		{append(uv([]byte{Version}, 1<<fAttempts), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), "attempts: truncated"}, // overflows
		{append(uv([]byte{Version}, 1<<fAttempts), 0x80), "attempts: truncated"},
		{uv([]byte{Version}, 1<<fTarget, 1<<numTargetFields), "target: fields unknown"},
		{uv([]byte{Version}, 1<<fTarget, 1<<fPull, 1), "target.pull: fields unknown"},
		{uv([]byte{Version}, 1<<fTarget, 1<<fHTTP, 1<<fHTTPHeaders, 1, 0), "target.http.headers: truncated"},
		{uv([]byte{Version}, 1<<fTarget, 1<<fHTTP, 1<<fHTTPHeaders, 1, 0, 1), "target.http.headers: truncated"},
		{uv([]byte{Version}, 1<<fRetry, 1<<numRetryFields), "retry: fields unknown"},
		{uv([]byte{Version}, 1<<fHistory, 2, 0), "history: truncated"},
		{uv([]byte{Version}, 1<<fHistory, 1, 1<<numEventFields), "history: fields unknown"},
		{uv([]byte{Version}, 1<<fHistory, 1, 1<<fEventWhat, 99<<1|1), "history.what: out of range"},
	} {
		got, err := Decode(tc.b)
		if err == nil || got != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%q) = %#v, %v; want an error with %q", tc.b, got, err, tc.want)
		}
	}
}

// checkRedecode checks that Decode, given b, returns an error or a task that
// encodes, decodes to the same task, and encodes the same again.
func checkRedecode(t *testing.T, b []byte) {
	t.Helper()
	got, err := Decode(b)
	if err != nil {
		if got != nil {
			t.Fatalf("Decode(%q) returned a task and an error: %v", b, err)
		}
		return
	}
	b2, err := Encode(got)
	if err != nil {
		t.Fatalf("Decode(%q) accepted a task that Encode refuses: %v\n%#v", b, err, got)
	}
	again, err := Decode(b2)
	if err != nil {
		t.Fatalf("Decode(Encode(Decode(%q))) = %v", b, err)
	}
	want := got
	if b[0] == versionJSON {
		want = canonical(got)
	}
	if !reflect.DeepEqual(want, again) {
		t.Fatalf("Decode(%q) does not survive another round (-want +got):\n%s", b, gocmp.Diff(want, again))
	}
	if b3, err := Encode(again); err != nil || !bytes.Equal(b2, b3) {
		t.Fatalf("Encode is not deterministic: %q then %q, %v", b2, b3, err)
	}
}

// canonical returns what a task decoded from JSON that version 1's encoder
// might not have written comes back as from version 2: times in UTC, and
// nil for empty payloads, header maps and histories.
func canonical(t *task.Task) *task.Task {
	c := Normalize(t.Clone())
	if len(c.Payload) == 0 {
		c.Payload = nil
	}
	if len(c.History) == 0 {
		c.History = nil
	}
	if c.Target.HTTP != nil && len(c.Target.HTTP.Headers) == 0 {
		c.Target.HTTP.Headers = nil
	}
	return c
}

// TestSymbols checks that symbolIndex agrees with the table, and that every
// state is a symbol.
func TestSymbols(t *testing.T) {
	for i, s := range symbols {
		if got := symbolIndex(s); got != i {
			t.Errorf("symbolIndex(%q) = %d, want %d", s, got, i)
		}
	}
	for _, s := range task.States {
		if symbolIndex(string(s)) < 0 {
			t.Errorf("state %q is not in symbols", s)
		}
	}
	if got := symbolIndex("Scheduled"); got != -1 {
		t.Errorf(`symbolIndex("Scheduled") = %d, want -1`, got)
	}
}

// TestDeterministic checks that equal tasks encode to equal bytes, whatever
// the order a map yields its headers in (more than fit appendHeaders's stack
// buffer here).
func TestDeterministic(t *testing.T) {
	tk := typicalTask()
	for i := range 40 {
		tk.Target.HTTP.Headers[fmt.Sprintf("X-%d", i)] = fmt.Sprint(i)
	}
	first, err := Encode(tk)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if b, err := Encode(tk.Clone()); err != nil || !bytes.Equal(b, first) {
			t.Fatalf("Encode differs: %q then %q, %v", first, b, err)
		}
	}
	checkEqual(t, tk, roundTrip(t, Encode, tk))
}

// TestEncodeAllocs checks that Encode allocates once, and AppendEncode
// into a large enough buffer not at all.
func TestEncodeAllocs(t *testing.T) {
	tk := typicalTask()
	if n := testing.AllocsPerRun(100, func() { _, _ = Encode(tk) }); n != 1 {
		t.Errorf("Encode allocates %v times, want 1", n)
	}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendEncode(buf[:0], tk) }); n != 0 {
		t.Errorf("AppendEncode allocates %v times, want 0", n)
	}
}

// TestDecodeShares checks that a decoded task shares no memory with the
// record, nor with another task decoded from it.
func TestDecodeShares(t *testing.T) {
	b, err := Encode(typicalTask())
	if err != nil {
		t.Fatal(err)
	}
	t1, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	t2, _ := Decode(b)
	for i := range b {
		b[i] = 0
	}
	t1.Payload[0] = 'y'
	*t1.Deadline = time.Time{}
	t1.Target.HTTP.Headers["X-Tenant"] = "other"
	t1.History[0].What = "changed"
	checkEqual(t, typicalTask(), t2)
}
