package sched

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var t0 = time.UnixMilli(1_800_000_000_000)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func id(n int) task.ID {
	var i task.ID
	binary.BigEndian.PutUint32(i[12:], uint32(n))
	return i
}

func newCore(maxLoaded int) *Core {
	return New(t0, Config{MaxLoaded: maxLoaded, Weight: weights})
}

// loadTo scans the (empty) store up to until, so that the cursor is there.
func loadTo(t *testing.T, c *Core, until time.Time) {
	t.Helper()
	s, ok := c.BeginScan(until, 100)
	if !ok {
		t.Fatalf("BeginScan(%v): nothing to scan", until)
	}
	c.EndScan(s, nil, false)
}

func (c *Core) has(id task.ID) bool { _, ok := c.wheel.Contains(id); return ok }

func takeIDs(ts []Taken) []task.ID {
	var out []task.ID
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestTrackAdvanceTake(t *testing.T) {
	c := newCore(100)
	loadTo(t, c, ms(1000))
	if !c.Track(Entry{ID: id(1), WakeAt: ms(20), App: "shop"}) {
		t.Error("first entry: not earlier than an empty wheel")
	}
	c.Track(Entry{ID: id(2), WakeAt: ms(10), App: "bank"})
	c.Track(Entry{ID: id(3), WakeAt: ms(2000)}) // beyond the cursor
	if c.has(id(3)) {
		t.Error("an entry beyond the cursor is in the wheel")
	}
	moved, next := c.Advance(ms(5))
	if moved != 0 || !next.Equal(ms(10)) {
		t.Errorf("Advance(5) = %d, %v; want 0, 10ms", moved, next)
	}
	if c.Track(Entry{ID: id(4), WakeAt: ms(15)}) {
		t.Error("an entry after the armed instant reported earlier")
	}
	if !c.Track(Entry{ID: id(5), WakeAt: ms(7)}) {
		t.Error("an entry before the armed instant not reported earlier")
	}
	moved, next = c.Advance(ms(20))
	if moved != 4 || !next.IsZero() {
		t.Errorf("Advance(20) = %d, %v; want 4, zero", moved, next)
	}
	got := c.Take(10)
	if len(got) != 4 {
		t.Fatalf("Take = %v, want 4 tasks", got)
	}
	for _, tk := range got {
		want := map[task.ID]string{id(1): "shop", id(2): "bank"}[tk.ID] // 4 and 5: unknown
		if tk.App != want {
			t.Errorf("taken %v with app %q, want %q", tk.ID, tk.App, want)
		}
	}
	if s := c.Stats(); s.Wheel != 0 || s.Ready != 0 {
		t.Errorf("after taking all: %+v", s)
	}
}

// TestStaleCopyIgnored is the flake of the stale wheel entries: a claim
// (write 2) tracked before the fire that preceded it (write 1) must keep its
// entry, whatever the older copy says.
func TestStaleCopyIgnored(t *testing.T) {
	c := newCore(100)
	loadTo(t, c, ms(1000))
	c.Track(Entry{ID: id(1), WakeAt: ms(500), Seq: 2})
	c.Track(Entry{ID: id(1), Seq: 1})                // the older copy: nothing pending
	c.Track(Entry{ID: id(1), WakeAt: ms(5), Seq: 1}) // or another time
	if at, ok := c.wheel.Contains(id(1)); !ok || at != ms(500).UnixMilli() {
		t.Fatalf("entry after stale copies: %v %v, want at 500ms", at, ok)
	}
	c.Track(Entry{ID: id(1), WakeAt: ms(600)}) // read back from storage: taken as it is
	if at, _ := c.wheel.Contains(id(1)); at != ms(600).UnixMilli() {
		t.Errorf("a copy without a number did not move the entry: at %d", at)
	}
	c.Track(Entry{ID: id(1), Seq: 3})
	if c.has(id(1)) {
		t.Error("a newer copy with nothing pending did not remove the entry")
	}
}

// TestScanNotesConcurrentWrites: a write beyond the cursor while a scan
// runs is added when the scan ends if the scan moved the cursor past it,
// though the scan's read did not see it.
func TestScanNotesConcurrentWrites(t *testing.T) {
	c := newCore(100)
	s, ok := c.BeginScan(ms(1000), 100)
	if !ok {
		t.Fatal("nothing to scan")
	}
	c.Track(Entry{ID: id(1), WakeAt: ms(300)})  // during the scan, beyond the old cursor
	c.Track(Entry{ID: id(2), WakeAt: ms(5000)}) // beyond where the scan ends
	earlier, again := c.EndScan(s, []store.Wakeup{{ID: id(3), At: ms(100)}}, false)
	if !earlier || again {
		t.Errorf("EndScan = %v, %v; want earlier, not again", earlier, again)
	}
	if !c.has(id(1)) || !c.has(id(3)) || c.has(id(2)) {
		t.Errorf("after the scan: 1 %v, 3 %v, 2 %v; want 1 and 3 only", c.has(id(1)), c.has(id(3)), c.has(id(2)))
	}
	if _, ok := c.BeginScan(ms(1000), 100); ok {
		t.Error("scanned again up to where it had loaded")
	}
}

func TestScanPagesAndFailure(t *testing.T) {
	c := newCore(100)
	s, _ := c.BeginScan(ms(1000), 2)
	if s.Limit != 2 {
		t.Fatalf("limit %d, want the page of 2", s.Limit)
	}
	if _, again := c.EndScan(s, []store.Wakeup{{ID: id(1), At: ms(10)}, {ID: id(2), At: ms(20)}}, false); !again {
		t.Error("a full page did not ask for another")
	}
	s, _ = c.BeginScan(ms(1000), 2)
	if want := (store.Cursor{At: ms(20), ID: id(2)}); s.From != want {
		t.Errorf("next page from %v, want %v", s.From, want)
	}
	c.Track(Entry{ID: id(9), WakeAt: ms(500)}) // noted
	if _, again := c.EndScan(s, nil, true); again {
		t.Error("a failed scan asked to go on at once")
	}
	if c.has(id(9)) {
		t.Error("a failed scan added what it noted (its cursor did not move)")
	}
	s, _ = c.BeginScan(ms(1000), 2)
	if want := (store.Cursor{At: ms(20), ID: id(2)}); s.From != want {
		t.Errorf("after a failure: from %v, want %v", s.From, want)
	}
}

func TestCapTrimAndNeedsLoad(t *testing.T) {
	c := newCore(8)
	// The loader stops at the cap.
	s, _ := c.BeginScan(ms(1000), 100)
	if s.Limit != 8 {
		t.Fatalf("limit %d, want the room of 8", s.Limit)
	}
	var ws []store.Wakeup
	for i := range 8 {
		ws = append(ws, store.Wakeup{ID: id(i), At: ms(10 * (i + 1))})
	}
	c.EndScan(s, ws, false)
	if _, ok := c.BeginScan(ms(1000), 100); ok {
		t.Error("scanned with no room")
	}
	if c.NeedsLoad() {
		t.Error("needs load while full")
	}
	// Direct inserts past 5/4 of the cap trim back to 3/4, keeping the
	// earliest, with the cursor at the last one kept.
	c.Track(Entry{ID: id(100), WakeAt: ms(1)})
	c.Track(Entry{ID: id(101), WakeAt: ms(2)})
	if n := c.Stats().Wheel; n != 10 {
		t.Fatalf("at 5/4 of the cap: %d entries, want 10 (no trim yet)", n)
	}
	c.Track(Entry{ID: id(102), WakeAt: ms(3)}) // 11 > 8+2: trim to 6
	if n := c.Stats().Wheel; n != 6 {
		t.Fatalf("after the trim: %d entries, want 6", n)
	}
	if !c.has(id(100)) || !c.has(id(102)) || !c.has(id(2)) || c.has(id(3)) {
		t.Error("the trim did not keep the earliest")
	}
	if want := (store.Cursor{At: ms(30), ID: id(2)}); c.cursor != want {
		t.Errorf("cursor after the trim %v, want %v", c.cursor, want)
	}
	// Room again: the loader is wanted.
	c.Advance(ms(100))
	c.Take(100)
	if !c.NeedsLoad() {
		t.Error("room again, but no load wanted")
	}
}

func TestDeferEnqueueRescan(t *testing.T) {
	c := newCore(100)
	// Defer ignores the cursor (still at the start here).
	c.Defer(id(1), ms(50), "shop")
	c.Enqueue("shop", id(2))
	c.Enqueue("", id(3))
	c.Advance(ms(60))
	got := c.Take(10)
	want := []Taken{{ID: id(2), App: "shop"}, {ID: id(1), App: "shop"}, {ID: id(3)}} // shop's weight is 2
	if !slices.Equal(got, want) {
		t.Errorf("Take = %v, want %v", got, want)
	}
	loadTo(t, c, ms(1000))
	c.Track(Entry{ID: id(4), WakeAt: ms(500), Seq: 7, App: "shop"})
	c.Rescan(true)
	if c.has(id(4)) || len(c.apps.tags) != 0 || len(c.seq) != 0 {
		t.Error("Rescan(forget) kept entries or their bookkeeping")
	}
	if _, ok := c.BeginScan(ms(1000), 100); !ok {
		t.Error("nothing to scan after a rescan")
	}
}

// TestUntrackKeepsMapsInStep: every way an entry leaves the wheel drops its
// bookkeeping too.
func TestUntrackKeepsMapsInStep(t *testing.T) {
	c := newCore(100)
	loadTo(t, c, ms(1000))
	c.Track(Entry{ID: id(1), WakeAt: ms(10), Seq: 1, App: "shop"})
	c.Track(Entry{ID: id(2), WakeAt: ms(10), Seq: 1, App: "shop"})
	c.Track(Entry{ID: id(3), WakeAt: ms(10), Seq: 1, App: "shop"})
	c.Untrack(id(1))
	c.Track(Entry{ID: id(2), Seq: 2})                   // nothing pending
	c.Track(Entry{ID: id(3), WakeAt: ms(5000), Seq: 2}) // beyond the cursor
	if len(c.apps.tags) != 0 || len(c.seq) != 0 || c.Stats().Wheel != 0 {
		t.Errorf("left behind: apps %v, seq %v, wheel %d", c.apps.tags, c.seq, c.Stats().Wheel)
	}
}

// TestFairTurns: the apps with ready tasks take turns, each as many tasks
// as its weight, each app's tasks in due order; an app that runs out
// leaves the turns and joins them last when it has due tasks again.
func TestFairTurns(t *testing.T) {
	c := newCore(1000) // shop's weight is 2
	loadTo(t, c, ms(1000))
	for i := range 100 { // a backlog of bank's, all due at 10ms
		c.Track(Entry{ID: id(i), WakeAt: ms(10), App: "bank"})
	}
	for i := range 4 { // shop's came due next, then fund's
		c.Track(Entry{ID: id(200 + i), WakeAt: ms(11 + i), App: "shop"})
	}
	c.Track(Entry{ID: id(300), WakeAt: ms(12), App: "fund"})
	c.Advance(ms(20))
	if s := c.Stats(); s.Ready != 105 || s.Apps != 3 {
		t.Fatalf("stats %+v, want 105 ready of 3 apps", s)
	}
	apps := func(ts []Taken) string {
		var b []byte
		for _, tk := range ts {
			b = append(b, tk.App[0])
		}
		return string(b)
	}
	got := c.Take(5)
	if a := apps(got); a != "bssfb" {
		t.Errorf("first take by app %q, want bssfb (bank, shop twice, fund, bank)", a)
	}
	if got[1].ID != id(200) || got[2].ID != id(201) {
		t.Errorf("first take %v: not shop's tasks in due order", takeIDs(got))
	}
	// Turns go on across takes of one task: shop, bank, shop (fund is out).
	if a := apps(append(append(c.Take(1), c.Take(1)...), c.Take(1)...)); a != "ssb" {
		t.Errorf("takes of one by app %q, want ssb", a)
	}
	// Shop ran out: fund comes back last, after bank.
	c.Enqueue("fund", id(301))
	c.Track(Entry{ID: id(202 + 10), WakeAt: ms(20), App: "shop"})
	c.Advance(ms(20))
	if a := apps(c.Take(6)); a != "bfsbbb" {
		t.Errorf("take after rejoining by app %q, want bfsbbb", a)
	}
	if got := c.Take(1000); len(got) != 105-5-3-6+2 {
		t.Errorf("took %d at the end, want the rest of bank's", len(got))
	}
	if s := c.Stats(); s.Ready != 0 || s.Apps != 0 {
		t.Errorf("stats after taking all %+v", s)
	}
}

// TestTakeWithinRoom: an app with no room left is passed over, its tasks
// kept ready in order and its turn's credit kept; the others go on.
func TestTakeWithinRoom(t *testing.T) {
	c := newCore(1000) // shop's weight is 2
	loadTo(t, c, ms(1000))
	for i := range 10 {
		c.Track(Entry{ID: id(i), WakeAt: ms(10 + i), App: "shop"})
		c.Track(Entry{ID: id(100 + i), WakeAt: ms(10 + i), App: "bank"})
	}
	c.Advance(ms(30))
	if got := c.ReadyApps(nil); len(got) != 2 {
		t.Fatalf("ready apps %q, want shop and bank", got)
	}
	room := map[string]int{"shop": 1}
	got, held := c.TakeWithin(6, room)
	var shop, bank []task.ID
	for _, tk := range got {
		if tk.App == "shop" {
			shop = append(shop, tk.ID)
		} else {
			bank = append(bank, tk.ID)
		}
	}
	if len(got) != 6 || len(shop) != 1 || !held {
		t.Fatalf("took %d (%d of shop's), held back %v; want 6, 1 of shop's, held back", len(got), len(shop), held)
	}
	if shop[0] != id(0) || bank[0] != id(100) {
		t.Errorf("took %v: not in due order", takeIDs(got))
	}
	if room["shop"] != 0 {
		t.Errorf("room left for shop %d, want 0", room["shop"])
	}
	// No room for anyone: nothing is taken, and nothing is lost.
	if got, held := c.TakeWithin(10, map[string]int{"shop": 0, "bank": 0}); len(got) != 0 || !held {
		t.Fatalf("took %d with no room (held back %v), want none", len(got), held)
	}
	// Room again: shop's turn goes on (a credit of one left), then bank's.
	got, held = c.TakeWithin(3, nil)
	if held || len(got) != 3 || got[0].ID != id(1) || got[1].App != "bank" {
		t.Errorf("took %v (held back %v), want shop's next task first, then bank's", takeIDs(got), held)
	}
	if s := c.Stats(); s.Ready != 20-6-3 {
		t.Errorf("ready %d, want %d", s.Ready, 20-6-3)
	}
}

// TestTakeWithinSizedByRoom: the tasks taken come in a slice sized by the
// apps' room, not by the limit: an app at its in-flight cap given a few
// slots at a time took them in a slice of 128 (500 bytes of garbage per
// push fire in a burst).
func TestTakeWithinSizedByRoom(t *testing.T) {
	c := newCore(1000)
	loadTo(t, c, ms(1000))
	for i := range 200 {
		c.Track(Entry{ID: id(i), WakeAt: ms(10), App: "shop"})
	}
	c.Advance(ms(30))
	got, _ := c.TakeWithin(128, map[string]int{"shop": 3})
	if len(got) != 3 || cap(got) != 3 {
		t.Errorf("took %d in a slice of %d, want 3 in a slice of 3", len(got), cap(got))
	}
	if got, _ := c.TakeWithin(128, nil); len(got) != 128 {
		t.Errorf("took %d without bounds, want 128", len(got))
	}
}
