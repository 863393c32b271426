package timingwheel

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	gocmp "github.com/google/go-cmp/cmp"
)

func TestPlacement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		at, now     int64
		level, slot int
	}{
		{at: 5, now: 5, level: 0, slot: 5},
		{at: 3, now: 5, level: 0, slot: 5}, // due: current slot
		{at: math.MinInt64, now: 5, level: 0, slot: 5},
		{at: 63, now: 0, level: 0, slot: 63},
		{at: 64, now: 63, level: 1, slot: 1},
		{at: 64, now: 0, level: 1, slot: 1},
		{at: 127, now: 64, level: 0, slot: 63},
		{at: 4095, now: 0, level: 1, slot: 63},
		{at: 4096, now: 4095, level: 2, slot: 1},
		{at: 4096 + 63, now: 4096, level: 0, slot: 63},
		{at: 1<<18 + 5, now: 1<<18 - 1, level: 3, slot: 1},
		{at: 1<<48 - 1, now: 0, level: 7, slot: 63},
		{at: 1 << 48, now: 0, level: overflowLevel},
		{at: 1 << 48, now: 1<<48 - 1, level: overflowLevel},
		{at: math.MaxInt64, now: 0, level: overflowLevel},
		{at: math.MaxInt64, now: math.MaxInt64 - 1<<47, level: 7, slot: 63},
		{at: 0, now: -1, level: overflowLevel}, // -1 and 0 lie in different top windows
		{at: -1, now: -64, level: 0, slot: 63},
		{at: 0, now: -64, level: overflowLevel},
	}
	for _, tt := range tests {
		level, slot := placement(tt.at, tt.now)
		if level != tt.level || slot != tt.slot {
			t.Errorf("placement(%d, %d) = %d, %d; want %d, %d", tt.at, tt.now, level, slot, tt.level, tt.slot)
		}
	}
}

// TestScript runs small timelines written as scripts, one command a line,
// each followed by its expected output after "->":
//
//	new <now>                  a fresh wheel
//	add <key> <at>             Add (no output)
//	remove <key> -> <bool>     Remove
//	contains <key> -> <at>|-   Contains
//	next -> <t>|-              Next
//	len -> <n>                 Len
//	now -> <t>                 Now
//	advance <to> -> <list>     Advance: key@at@expiry-now, space separated
//
// Keys expired in the same millisecond are listed sorted by key, since their
// order is unspecified. Numbers may be written as 1<<48 or max (MaxInt64).
func TestScript(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
	}{{
		name: "level 0",
		script: `
new 0
add a 1
add b 63
next -> 1
advance 0 ->
advance 1 -> a@1@1
next -> 63
advance 62 ->
next -> 63
advance 100 -> b@63@63
next -> -
now -> 100`,
	}, {
		name: "63 to 64",
		script: `
new 63
add a 64
add b 65
next -> 64
advance 63 ->
advance 64 -> a@64@64
next -> 65
advance 65 -> b@65@65`,
	}, {
		name: "4095 to 4096",
		script: `
new 4095
add a 4096
add b 4097
add c 4095
next -> 4095
advance 4095 -> c@4095@4095
next -> 4096
advance 4096 -> a@4096@4096
advance 5000 -> b@4097@4097`,
	}, {
		name: "cascade from a coarse level",
		script: `
new 0
add a 1000000
next -> 786432
advance 786431 ->
advance 786432 ->
next -> 999424
advance 999999 ->
next -> 1000000
advance 1000000 -> a@1000000@1000000`,
	}, {
		name: "jump across windows of every level",
		script: `
new 0
add a 5
add b 300
add c 70000
add d 1<<40
advance 1<<41 -> a@5@5 b@300@300 c@70000@70000 d@1099511627776@1099511627776
len -> 0
now -> 2199023255552`,
	}, {
		name: "just before window boundaries",
		script: `
new 262143
add a 262144
add b 262143
advance 262144 -> b@262143@262143 a@262144@262144`,
	}, {
		name: "due at add",
		script: `
new 100
add a 50
add b 100
add c 101
next -> 100
advance 10 -> a@50@100 b@100@100
now -> 100
next -> 101`,
	}, {
		name: "re-add earlier and later",
		script: `
new 0
add a 100
add a 50
len -> 1
contains a -> 50
next -> 50
advance 49 ->
advance 60 -> a@50@50
add a 100
add a 200
advance 150 ->
contains a -> 200
add a 10
contains a -> 10
advance 150 -> a@10@150`,
	}, {
		name: "remove",
		script: `
new 0
add a 10
add b 10
remove a -> true
remove a -> false
remove zz -> false
contains a -> -
advance 10 -> b@10@10
remove b -> false`,
	}, {
		name: "far future is kept exact",
		script: `
new 0
add a max
add b 1<<48
contains a -> 9223372036854775807
next -> 281474976710656
advance 1<<48 -> b@281474976710656@281474976710656
next -> 562949953421312
advance max -> a@9223372036854775807@9223372036854775807
now -> 9223372036854775807`,
	}, {
		name: "top window ends",
		script: `
new 281474976710655
add a 281474976710656
next -> 281474976710656
advance 281474976710655 ->
advance 281474976710656 -> a@281474976710656@281474976710656`,
	}, {
		name: "negative times",
		script: `
new -100
add a -1
add b 0
add c -200
advance -50 -> c@-200@-100
next -> -1
advance 0 -> a@-1@-1 b@0@0`,
	}, {
		name: "same millisecond from different levels",
		script: `
new 0
add a 5000
advance 4000 ->
add b 5000
advance 5000 -> a@5000@5000 b@5000@5000`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := strings.TrimSpace(tt.script)
			got := runScript(t, want)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("script mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// runScript runs a script and returns it with the actual outputs.
func runScript(t *testing.T, script string) string {
	t.Helper()
	num := func(s string) int64 {
		t.Helper()
		if s == "max" {
			return math.MaxInt64
		}
		if a, b, ok := strings.Cut(s, "<<"); ok {
			return num1(t, a) << num1(t, b)
		}
		return num1(t, s)
	}
	var w *Wheel[string]
	var out []string
	for line := range strings.Lines(script) {
		cmdline, _, _ := strings.Cut(strings.TrimSpace(line), "->")
		f := strings.Fields(cmdline)
		var res string
		switch f[0] {
		case "new":
			w = New[string](num(f[1]))
		case "add":
			w.Add(f[1], num(f[2]))
		case "remove":
			res = strconv.FormatBool(w.Remove(f[1]))
		case "contains":
			res = "-"
			if at, ok := w.Contains(f[1]); ok {
				res = strconv.FormatInt(at, 10)
			}
		case "next":
			res = "-"
			if n, ok := w.Next(); ok {
				res = strconv.FormatInt(n, 10)
			}
		case "len":
			res = strconv.Itoa(w.Len())
		case "now":
			res = strconv.FormatInt(w.Now(), 10)
		case "advance":
			type fired struct {
				k       string
				at, now int64
			}
			var got []fired
			w.Advance(num(f[1]), func(k string, at int64) {
				got = append(got, fired{k, at, w.Now()})
			})
			if !slices.IsSortedFunc(got, func(a, b fired) int { return cmp.Compare(a.now, b.now) }) {
				t.Errorf("%s: expired out of order: %v", cmdline, got)
			}
			slices.SortStableFunc(got, func(a, b fired) int {
				return cmp.Or(cmp.Compare(a.now, b.now), cmp.Compare(a.k, b.k))
			})
			var s []string
			for _, g := range got {
				s = append(s, fmt.Sprintf("%s@%d@%d", g.k, g.at, g.now))
			}
			res = strings.Join(s, " ")
		default:
			t.Fatalf("unknown command %q", line)
		}
		if err := checkInvariants(w); err != nil {
			t.Fatalf("after %q: %v", cmdline, err)
		}
		switch f[0] {
		case "new", "add":
			out = append(out, strings.TrimSpace(cmdline))
		default:
			out = append(out, strings.TrimSpace(strings.TrimSpace(cmdline)+" -> "+res))
		}
	}
	return strings.Join(out, "\n")
}

func num1(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCallbackChanges covers Add and Remove from Advance's callback.
func TestCallbackChanges(t *testing.T) {
	t.Parallel()
	type fired struct {
		K       string
		At, Now int64
	}
	tests := []struct {
		name  string
		setup map[string]int64
		to    int64
		react func(w *Wheel[string], k string, at int64)
		want  []fired
		left  map[string]int64
	}{{
		name:  "remove a key due later in the same call",
		setup: map[string]int64{"a": 10, "b": 20, "c": 30},
		to:    30,
		react: func(w *Wheel[string], k string, _ int64) {
			if k == "a" {
				w.Remove("b")
			}
		},
		want: []fired{{"a", 10, 10}, {"c", 30, 30}},
		left: map[string]int64{},
	}, {
		name:  "remove a key due in the same millisecond",
		setup: map[string]int64{"a": 10, "b": 10},
		to:    10,
		react: func(w *Wheel[string], k string, _ int64) {
			w.Remove(map[string]string{"a": "b", "b": "a"}[k])
		},
		want: []fired{{"?", 10, 10}},
		left: map[string]int64{},
	}, {
		name:  "remove the expired key itself",
		setup: map[string]int64{"a": 10},
		to:    10,
		react: func(w *Wheel[string], k string, _ int64) {
			if w.Remove(k) {
				panic("expired key still present")
			}
		},
		want: []fired{{"a", 10, 10}},
		left: map[string]int64{},
	}, {
		name:  "re-add later within the target",
		setup: map[string]int64{"a": 10},
		to:    100,
		react: func(w *Wheel[string], k string, at int64) {
			if at < 50 {
				w.Add(k, at+40)
			}
		},
		want: []fired{{"a", 10, 10}, {"a", 50, 50}},
		left: map[string]int64{},
	}, {
		name:  "re-add beyond the target",
		setup: map[string]int64{"a": 10},
		to:    100,
		react: func(w *Wheel[string], k string, at int64) { w.Add(k, at+1000) },
		want:  []fired{{"a", 10, 10}},
		left:  map[string]int64{"a": 1010},
	}, {
		name:  "add a due key: expired by the same call",
		setup: map[string]int64{"a": 10, "c": 11},
		to:    11,
		react: func(w *Wheel[string], k string, _ int64) {
			if k == "a" {
				w.Add("b", 3)
			}
		},
		want: []fired{{"a", 10, 10}, {"b", 3, 10}, {"c", 11, 11}},
		left: map[string]int64{},
	}, {
		name:  "move a pending key earlier",
		setup: map[string]int64{"a": 10, "b": 5000},
		to:    6000,
		react: func(w *Wheel[string], k string, _ int64) {
			if k == "a" {
				w.Add("b", 20)
			}
		},
		want: []fired{{"a", 10, 10}, {"b", 20, 20}},
		left: map[string]int64{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New[string](0)
			for k, at := range tt.setup {
				w.Add(k, at)
			}
			var got []fired
			w.Advance(tt.to, func(k string, at int64) {
				got = append(got, fired{k, at, w.Now()})
				tt.react(w, k, at)
				if err := checkInvariants(w); err != nil {
					t.Fatal(err)
				}
			})
			if tt.want[0].K == "?" && len(got) == 1 {
				tt.want[0].K = got[0].K // either one, not both
			}
			if diff := gocmp.Diff(tt.want, got); diff != "" {
				t.Errorf("expired (-want +got):\n%s", diff)
			}
			left := map[string]int64{}
			w.All(func(k string, at int64) { left[k] = at })
			if diff := gocmp.Diff(tt.left, left); diff != "" {
				t.Errorf("left (-want +got):\n%s", diff)
			}
			if next, ok := w.Next(); ok && next <= tt.to {
				t.Errorf("Next = %d after Advance(%d)", next, tt.to)
			}
		})
	}
}

func TestAdvanceFromCallbackPanics(t *testing.T) {
	t.Parallel()
	w := New[int](0)
	w.Add(1, 1)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
		// The guard is reset, and the wheel is still usable.
		w.Add(2, 2)
		w.Advance(2, func(int, int64) {})
		if w.Len() != 0 {
			t.Fatalf("Len = %d", w.Len())
		}
	}()
	w.Advance(1, func(int, int64) { w.Advance(2, func(int, int64) {}) })
}

func TestAll(t *testing.T) {
	t.Parallel()
	w := New[int](1000)
	want := map[int]int64{1: 5, 2: 1000, 3: 1001, 4: 1 << 30, 5: math.MaxInt64}
	for k, at := range want {
		w.Add(k, at)
	}
	got := map[int]int64{}
	w.All(func(k int, at int64) { got[k] = at })
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	if w.Len() != len(want) {
		t.Errorf("Len = %d", w.Len())
	}
}

// TestReuse checks that removed entries are reused and cleared.
func TestReuse(t *testing.T) {
	t.Parallel()
	w := New[string](0)
	for i := range 3000 {
		w.Add(strconv.Itoa(i), int64(i))
	}
	w.Advance(3000, func(string, int64) {})
	used := w.used
	for i := range 3000 {
		w.Add(strconv.Itoa(i), int64(i)+5000)
	}
	if w.used != used {
		t.Errorf("used grew from %d to %d: entries not reused", used, w.used)
	}
	for w.Len() > 0 {
		w.Advance(w.Now()+100, func(string, int64) {})
	}
	for i := w.free; i != 0; i = w.entry(i).next {
		if e := w.entry(i); e.key != "" || e.at != 0 {
			t.Fatalf("free entry %d not cleared: %+v", i, *e)
		}
	}
	if err := checkInvariants(w); err != nil {
		t.Fatal(err)
	}
}

func TestAddRemoveAllocs(t *testing.T) {
	w := New[uint64](0)
	for i := range uint64(4096) {
		w.Add(i, int64(i))
	}
	w.Advance(5000, func(uint64, int64) {})
	i := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		w.Add(i%1000, w.Now()+int64(i%5000))
		w.Remove((i + 500) % 1000)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocs per Add+Remove, want 0", allocs)
	}
}

// TestTags: a key's tag is set by AddTagged, kept by Add when the key moves,
// handed back by AdvanceTags, and gone with the key; it costs no memory.
func TestTags(t *testing.T) {
	t.Parallel()
	w := New[int](0)
	if old := w.AddTagged(1, 10, 7); old != 0 {
		t.Errorf("AddTagged of a new key returned %d, want 0", old)
	}
	w.Add(1, 20) // moved: keeps 7
	w.Add(2, 20) // new: 0
	if old := w.AddTagged(3, 30, 9); old != 0 {
		t.Errorf("AddTagged(3) = %d", old)
	}
	if old := w.AddTagged(3, 15, 8); old != 9 {
		t.Errorf("AddTagged of a tagged key returned %d, want its old tag 9", old)
	}
	if tag, ok := w.Tag(1); tag != 7 || !ok {
		t.Errorf("Tag(1) = %d, %v; want 7 kept by Add's move", tag, ok)
	}
	if _, ok := w.Tag(4); ok {
		t.Error("Tag of a key not present: ok")
	}
	got := map[int]uint32{}
	w.AdvanceTags(100, func(k int, _ int64, tag uint32) { got[k] = tag })
	if diff := gocmp.Diff(map[int]uint32{1: 7, 2: 0, 3: 8}, got); diff != "" {
		t.Errorf("AdvanceTags (-want +got):\n%s", diff)
	}
	w.Add(1, 200) // reuses a freed entry: no tag left over
	if tag, _ := w.Tag(1); tag != 0 {
		t.Errorf("a key added again has tag %d, want 0", tag)
	}
	if err := checkInvariants(w); err != nil {
		t.Fatal(err)
	}
	if s := unsafe.Sizeof(entry[[16]byte]{}); s != 40 {
		t.Errorf("an entry of a 16-byte key takes %d bytes, want 40", s)
	}
	if s := unsafe.Sizeof(entry[int64]{}); s != 32 {
		t.Errorf("an entry of an 8-byte key takes %d bytes, want 32", s)
	}
}
