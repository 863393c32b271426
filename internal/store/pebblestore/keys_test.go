package pebblestore

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

var testMs = []int64{math.MinInt64, -62135596800000, -1, 0, 1, 1 << 40, 1893456000000, math.MaxInt64}

func testIDs() []task.ID {
	var gen task.IDGenerator
	var max task.ID
	for i := range max {
		max[i] = 0xFF
	}
	return []task.ID{{}, gen.New(time.UnixMilli(1893456000000), 0), gen.New(time.UnixMilli(1893456000000), 7), max}
}

func TestKeysRoundTrip(t *testing.T) {
	for _, ms := range testMs {
		for _, id := range testIDs() {
			gotMs, gotID, err := parseWakeKey(wakeKey(ms, id))
			if err != nil || gotMs != ms || gotID != id {
				t.Errorf("parseWakeKey(wakeKey(%d, %s)) = %d, %s, %v", ms, id, gotMs, gotID, err)
			}
			gotMs, gotID, err = parseSchedWakeKey(schedWakeKey(ms, id))
			if err != nil || gotMs != ms || gotID != id {
				t.Errorf("parseSchedWakeKey(schedWakeKey(%d, %s)) = %d, %s, %v", ms, id, gotMs, gotID, err)
			}
			gotMs, gotID, err = parseFinishedKey(finishedKey(ms, id))
			if err != nil || gotMs != ms || gotID != id {
				t.Errorf("parseFinishedKey(finishedKey(%d, %s)) = %d, %s, %v", ms, id, gotMs, gotID, err)
			}
			for _, app := range []string{"a", "my-app.v2", ""} {
				gotMs, gotID, err = parsePullKey(pullKey(app, ms, id), len(pullPrefix(app)))
				if err != nil || gotMs != ms || gotID != id {
					t.Errorf("parsePullKey(pullKey(%q, %d, %s)) = %d, %s, %v", app, ms, id, gotMs, gotID, err)
				}
				gotID, err = parseSchedListKey(schedListKey(app, id), len(schedListPrefix(app)))
				if err != nil || gotID != id {
					t.Errorf("parseSchedListKey(schedListKey(%q, %s)) = %s, %v", app, id, gotID, err)
				}
				gotID, err = parseAppStateKey(appStateKey(app, 3, id), len(appStatePrefix(app, 3)))
				if err != nil || gotID != id {
					t.Errorf("parseAppStateKey(appStateKey(%q, 3, %s)) = %s, %v", app, id, gotID, err)
				}
			}
		}
	}
	for _, bad := range [][]byte{nil, {prefixWake}, wakeKey(1, task.ID{})[:20], finishedKey(1, task.ID{})} {
		if _, _, err := parseWakeKey(bad); err == nil {
			t.Errorf("parseWakeKey(%x) did not fail", bad)
		}
	}
	for _, bad := range [][]byte{nil, {prefixScheduleWake}, schedWakeKey(1, task.ID{})[:20], wakeKey(1, task.ID{})} {
		if _, _, err := parseSchedWakeKey(bad); err == nil {
			t.Errorf("parseSchedWakeKey(%x) did not fail", bad)
		}
	}
	for _, bad := range [][]byte{schedListKey("a", task.ID{})[:10], appStateKey("a", 1, task.ID{})[:19]} {
		if _, err := parseSchedListKey(bad, len(schedListPrefix("a"))); err == nil {
			t.Errorf("parseSchedListKey(%x) did not fail", bad)
		}
	}
}

// compareWake orders (ms, id) pairs as the wake-time order does.
func compareWake(ms1 int64, id1 task.ID, ms2 int64, id2 task.ID) int {
	return cmp.Or(cmp.Compare(ms1, ms2), bytes.Compare(id1[:], id2[:]))
}

func TestWakeKeyOrder(t *testing.T) {
	type pair struct {
		ms int64
		id task.ID
	}
	var ps []pair
	for _, ms := range testMs {
		for _, id := range testIDs() {
			ps = append(ps, pair{ms, id})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var id task.ID
		for i := range id {
			id[i] = byte(r.IntN(256))
		}
		ps = append(ps, pair{r.Int64N(1<<44) - 1<<43, id})
	}
	for _, a := range ps {
		for _, b := range ps {
			want := compareWake(a.ms, a.id, b.ms, b.id)
			if got := bytes.Compare(wakeKey(a.ms, a.id), wakeKey(b.ms, b.id)); got != want {
				t.Fatalf("wake keys of (%d, %s) and (%d, %s) compare %d, want %d", a.ms, a.id, b.ms, b.id, got, want)
			}
			if got := bytes.Compare(finishedKey(a.ms, a.id), finishedKey(b.ms, b.id)); got != want {
				t.Fatalf("finished keys of (%d, %s) and (%d, %s) compare %d, want %d", a.ms, a.id, b.ms, b.id, got, want)
			}
			if got := bytes.Compare(pullKey("app", a.ms, a.id), pullKey("app", b.ms, b.id)); got != want {
				t.Fatalf("pull keys of (%d, %s) and (%d, %s) compare %d, want %d", a.ms, a.id, b.ms, b.id, got, want)
			}
		}
		// The bounds used for until and cutoff.
		if bytes.Compare(wakeBound(a.ms), wakeKey(a.ms, a.id)) > 0 {
			t.Errorf("wakeBound(%d) > wakeKey(%d, %s)", a.ms, a.ms, a.id)
		}
		if a.ms < math.MaxInt64 && bytes.Compare(wakeKey(a.ms, a.id), wakeBound(a.ms+1)) >= 0 {
			t.Errorf("wakeKey(%d, %s) >= wakeBound(%d)", a.ms, a.id, a.ms+1)
		}
		if a.ms < math.MaxInt64 && bytes.Compare(finishedKey(a.ms, a.id), finishedBound(a.ms+1)) >= 0 {
			t.Errorf("finishedKey(%d, %s) >= finishedBound(%d)", a.ms, a.id, a.ms+1)
		}
	}
}

// TestAppPrefixes checks that the keys of one app never fall in the range
// of another, even when one app's name starts with the other's.
func TestAppPrefixes(t *testing.T) {
	apps := []string{"a", "a.", "a-b", "ab", "b", "a0"}
	ids := testIDs()
	for _, app := range apps {
		for _, other := range apps {
			if app == other {
				continue
			}
			prefixes := map[string][2][]byte{
				"pull":          {pullPrefix(other), prefixEnd(pullPrefix(other))},
				"list":          {appStatePrefix(other, 1), prefixEnd(appStatePrefix(other, 1))},
				"key":           {keyKey(other, ""), prefixEnd(keyKey(other, ""))},
				"schedule list": {schedListPrefix(other), prefixEnd(schedListPrefix(other))},
				"schedule key":  {schedKeyKey(other, ""), prefixEnd(schedKeyKey(other, ""))},
			}
			keys := map[string][][]byte{
				"pull":          {pullKey(app, 0, ids[0]), pullKey(app, math.MaxInt64, ids[3])},
				"list":          {appStateKey(app, 1, ids[0]), appStateKey(app, 1, ids[3])},
				"key":           {keyKey(app, ""), keyKey(app, "\xff\xff"), keyKey(app, "\x00")},
				"schedule list": {schedListKey(app, ids[0]), schedListKey(app, ids[3])},
				"schedule key":  {schedKeyKey(app, ""), schedKeyKey(app, "\xff\xff"), schedKeyKey(app, "\x00")},
			}
			for kind, ks := range keys {
				lo, hi := prefixes[kind][0], prefixes[kind][1]
				for _, k := range ks {
					if bytes.Compare(k, lo) >= 0 && (hi == nil || bytes.Compare(k, hi) < 0) {
						t.Errorf("%s key %q of app %q is in the range of app %q", kind, k, app, other)
					}
				}
			}
		}
	}
}

// TestFamilies checks that every key family has a prefix of its own, so
// that the schedules' families never reach into the tasks'.
func TestFamilies(t *testing.T) {
	seen := map[byte]bool{}
	for _, p := range []byte{
		prefixTask, prefixWake, prefixPull, prefixKey, prefixApp, prefixFinished,
		prefixSchedule, prefixScheduleWake, prefixScheduleKey, prefixScheduleApp,
	} {
		if seen[p] {
			t.Errorf("prefix %q is used twice", p)
		}
		seen[p] = true
	}
}

func TestScheduleStateBytes(t *testing.T) {
	seen := map[byte]bool{}
	for _, s := range task.ScheduleStates {
		b, err := scheduleStateByte(s)
		if err != nil || b == 0 || seen[b] {
			t.Fatalf("scheduleStateByte(%s) = %d, %v; want a new non-zero byte", s, b, err)
		}
		seen[b] = true
		if got, err := parseScheduleStateByte(b); err != nil || got != s {
			t.Errorf("parseScheduleStateByte(scheduleStateByte(%s)) = %s, %v", s, got, err)
		}
	}
	if _, err := scheduleStateByte("scheduled"); err == nil {
		t.Error("scheduleStateByte(scheduled) did not fail")
	}
	if _, err := parseScheduleStateByte(0); err == nil {
		t.Error("parseScheduleStateByte(0) did not fail")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("a"), []byte("b")},
		{[]byte("a\x00"), []byte("a\x01")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
		{nil, nil},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStateAndKindBytes(t *testing.T) {
	seen := map[byte]bool{}
	for _, s := range task.States {
		b, err := stateByte(s)
		if err != nil || b == 0 || seen[b] {
			t.Fatalf("stateByte(%s) = %d, %v; want a new non-zero byte", s, b, err)
		}
		seen[b] = true
		if got, err := parseStateByte(b); err != nil || got != s {
			t.Errorf("parseStateByte(stateByte(%s)) = %s, %v", s, got, err)
		}
	}
	if _, err := stateByte("bogus"); err == nil {
		t.Error("stateByte(bogus) did not fail")
	}
	if _, err := parseStateByte(0); err == nil {
		t.Error("parseStateByte(0) did not fail")
	}
	seen = map[byte]bool{}
	for _, k := range []string{"http", "pull", "amqp", "nats", ""} {
		b, err := kindByte(k)
		if err != nil || seen[b] {
			t.Fatalf("kindByte(%q) = %d, %v; want a new byte", k, b, err)
		}
		seen[b] = true
		if got, err := parseKindByte(b); err != nil || got != k {
			t.Errorf("parseKindByte(kindByte(%q)) = %q, %v", k, got, err)
		}
	}
	if _, err := kindByte("smtp"); err == nil {
		t.Error("kindByte(smtp) did not fail")
	}
}

// TestRecordRoundTrip fills every field of a task, so that a field added to
// Task that the record loses makes it fail.
func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	later := at.Add(time.Minute)
	tk := &task.Task{
		ID:            testIDs()[1],
		App:           "app",
		Key:           "key",
		ScheduleID:    testIDs()[2],
		DueAt:         at,
		NextAttemptAt: at.Add(time.Second),
		Deadline:      &later,
		Payload:       []byte{0, 1, 2, 0xFF},
		Target: task.Target{
			HTTP: &task.HTTPTarget{URL: "https://x/y", Headers: map[string]string{"A": "b"}, Timeout: task.Duration(time.Second)},
			Pull: &task.PullTarget{},
			AMQP: &task.AMQPTarget{URL: "amqp://h", Exchange: "x", RoutingKey: "r"},
			NATS: &task.NATSTarget{URL: "nats://h", Subject: "s"},
		},
		Retry:          task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Hour)},
		State:          task.Delivering,
		Attempts:       2,
		LastError:      "boom",
		Lease:          "lease",
		LeaseExpiresAt: &later,
		CreatedAt:      at,
		UpdatedAt:      at.Add(2 * time.Second),
		FinishedAt:     &later,
		History:        []task.Event{{At: at, What: "attempt", Attempt: 2, Error: "boom"}},
		WakeAt:         later,
		Trace:          &task.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "rojo=1"},
	}
	v := reflect.ValueOf(*tk)
	for i := range v.NumField() {
		if v.Type().Field(i).Name == "Seq" {
			continue // the engine's in-memory write number: never stored
		}
		if v.Field(i).IsZero() {
			t.Fatalf("bad test: field %s is not set", v.Type().Field(i).Name)
		}
	}
	b, err := encodeRecord(tk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(tk, got); diff != "" {
		t.Errorf("record round trip (-want +got):\n%s", diff)
	}
	if !reflect.DeepEqual(tk, got) {
		t.Errorf("record round trip is not deeply equal: %#v", got)
	}

	// Empty values come back empty.
	empty := &task.Task{ID: tk.ID, App: "a", State: task.Scheduled}
	b, err = encodeRecord(empty)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = decodeRecord(b); err != nil || !reflect.DeepEqual(empty, got) {
		t.Errorf("round trip of %#v = %#v, %v", empty, got, err)
	}

	for _, bad := range [][]byte{nil, {2, '{', '}'}, {record.Version, '{'}} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) did not fail", bad)
		}
	}
}

// FuzzKeys checks that wake keys, of tasks and of schedules, round-trip and
// sort as (ms, id) do.
func FuzzKeys(f *testing.F) {
	f.Add(int64(0), []byte{}, int64(1), []byte{1})
	f.Add(int64(-1), []byte{0xFF}, int64(0), []byte{0})
	f.Add(int64(math.MinInt64), bytes.Repeat([]byte{0xFF}, 16), int64(math.MaxInt64), []byte{})
	f.Fuzz(func(t *testing.T, ms1 int64, b1 []byte, ms2 int64, b2 []byte) {
		var id1, id2 task.ID
		copy(id1[:], b1)
		copy(id2[:], b2)
		k1, k2 := wakeKey(ms1, id1), wakeKey(ms2, id2)
		for _, c := range []struct {
			k  []byte
			ms int64
			id task.ID
		}{{k1, ms1, id1}, {k2, ms2, id2}} {
			ms, id, err := parseWakeKey(c.k)
			if err != nil || ms != c.ms || id != c.id {
				t.Fatalf("parseWakeKey(wakeKey(%d, %x)) = %d, %x, %v", c.ms, c.id, ms, id, err)
			}
		}
		if got, want := bytes.Compare(k1, k2), compareWake(ms1, id1, ms2, id2); got != want {
			t.Fatalf("wake keys of (%d, %x) and (%d, %x) compare %d, want %d", ms1, id1, ms2, id2, got, want)
		}
		// Keys sort as the ms do against the bound of ms2.
		if got, want := bytes.Compare(k1, wakeBound(ms2)) < 0, ms1 < ms2; got != want {
			t.Fatalf("wakeKey(%d) < wakeBound(%d) = %v, want %v", ms1, ms2, got, want)
		}
		// The schedules' due order is laid out the same way.
		s1, s2 := schedWakeKey(ms1, id1), schedWakeKey(ms2, id2)
		if ms, id, err := parseSchedWakeKey(s1); err != nil || ms != ms1 || id != id1 {
			t.Fatalf("parseSchedWakeKey(schedWakeKey(%d, %x)) = %d, %x, %v", ms1, id1, ms, id, err)
		}
		if got, want := bytes.Compare(s1, s2), compareWake(ms1, id1, ms2, id2); got != want {
			t.Fatalf("schedule wake keys of (%d, %x) and (%d, %x) compare %d, want %d", ms1, id1, ms2, id2, got, want)
		}
		if got, want := bytes.Compare(s1, schedWakeBound(ms2)) < 0, ms1 < ms2; got != want {
			t.Fatalf("schedWakeKey(%d) < schedWakeBound(%d) = %v, want %v", ms1, ms2, got, want)
		}
	})
}

// TestWakeupApp: a wake entry carries its task's app; one written before it
// did (state and kind bytes only) still reads, with no app.
func TestWakeupApp(t *testing.T) {
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	a, b := pullTask(&g, "shop", now), pullTask(&g, "bank", now.Add(time.Second))
	a.WakeAt, b.WakeAt = a.DueAt, b.DueAt
	if _, err := s.Create(t.Context(), []*task.Task{a, b}); err != nil {
		t.Fatal(err)
	}
	old := []byte{mustByte(stateByte(task.Scheduled)), mustByte(kindByte("pull"))}
	if err := s.db.Set(wakeKey(b.WakeAt.UnixMilli(), b.ID), old, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Wakeups(t.Context(), store.Cursor{}, now.Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID != a.ID || ws[0].App != "shop" || ws[1].ID != b.ID || ws[1].App != "" || ws[1].Kind != "pull" {
		t.Errorf("Wakeups = %+v, want shop's with its app, then bank's old entry without one", ws)
	}
}

func mustByte(b byte, err error) byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestIndexEntries: indexEntries, which cuts every entry of a task from
// one buffer, gives the keys and values the key builders make, for each
// kind of entry a task can have, and entries that appending to cannot
// overwrite one another.
func TestIndexEntries(t *testing.T) {
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	fin := now.Add(time.Minute)
	var gen task.IDGenerator
	pull := task.Target{Pull: &task.PullTarget{}}
	push := task.Target{HTTP: &task.HTTPTarget{URL: "http://x"}}
	cases := []*task.Task{
		{ID: gen.New(now, 0), App: "a", State: task.Scheduled, Target: pull, WakeAt: now, NextAttemptAt: now.Add(time.Second)},
		{ID: gen.New(now, 0), App: "app.x-1", Key: "order-42", State: task.Scheduled, Target: pull, WakeAt: now, NextAttemptAt: now},
		{ID: gen.New(now, 0), App: "a", State: task.Scheduled, Target: pull, NextAttemptAt: now}, // waiting unwoken
		{ID: gen.New(now, 0), App: "b", State: task.Delivering, Target: pull, WakeAt: now.Add(30 * time.Second)},
		{ID: gen.New(now, 0), App: "b", Key: "k", State: task.Delivered, Target: pull, FinishedAt: &fin},
		{ID: gen.New(now, 0), App: "c", State: task.Scheduled, Target: push, WakeAt: now},
		{ID: gen.New(now, 0), App: "c", Key: "kk", State: task.Expired, Target: push, WakeAt: fin, FinishedAt: &fin},
		{ID: gen.New(now, 0), App: "c", State: task.Cancelled, Target: push},
	}
	for _, tk := range cases {
		sb, _ := stateByte(tk.State)
		kb, _ := kindByte(tk.Target.Kind())
		want := []entry{{key: appStateKey(tk.App, sb, tk.ID)}}
		if !tk.WakeAt.IsZero() {
			want = append(want, entry{wakeKey(tk.WakeAt.UnixMilli(), tk.ID), append([]byte{sb, kb}, tk.App...)})
		}
		if tk.State == task.Scheduled && tk.Target.Pull != nil && (tk.WakeAt.IsZero() || !tk.WakeAt.Equal(tk.NextAttemptAt)) {
			// Woken at its next attempt, its w entry finds it.
			want = append(want, entry{key: pullKey(tk.App, tk.NextAttemptAt.UnixMilli(), tk.ID)})
		}
		if tk.Key != "" {
			want = append(want, entry{keyKey(tk.App, tk.Key), tk.ID[:]})
		}
		if tk.State.Final() && tk.FinishedAt != nil {
			want = append(want, entry{key: finishedKey(tk.FinishedAt.UnixMilli(), tk.ID)})
		}
		var arr [maxEntries]entry
		got, err := indexEntries(tk, arr[:0])
		if err != nil {
			t.Fatalf("%s %s: %v", tk.App, tk.State, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s %s: %d entries, want %d", tk.App, tk.State, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) {
				t.Errorf("%s %s: entry %d = %x → %x, want %x → %x", tk.App, tk.State, i, got[i].key, got[i].value, want[i].key, want[i].value)
			}
		}
		// Appending to one entry's slices leaves the others as they are.
		for i := range got {
			_ = append(got[i].key, 0xEE, 0xEE)
			_ = append(got[i].value, 0xEE, 0xEE)
		}
		for i := range want {
			if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) {
				t.Errorf("%s %s: entry %d changed by an append to another", tk.App, tk.State, i)
			}
		}
	}
	if none, err := indexEntries(nil, nil); err != nil || len(none) != 0 {
		t.Errorf("indexEntries(nil) = %v, %v; want none", none, err)
	}
}
