package metrics

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecent(t *testing.T) {
	var r recent
	t0 := time.Unix(1_800_000_000, 0)

	// Second 0: 1..100 ms. Second 1: nothing. Second 2: one attempt.
	for i := 100; i >= 1; i-- {
		r.add(t0.Add(time.Duration(i)*time.Millisecond), time.Duration(i)*time.Millisecond)
	}
	r.add(t0.Add(2*time.Second), 1500*time.Microsecond)
	r.add(t0.Add(2*time.Second), -time.Second) // early (a clock step): counted as 0

	got := r.seconds(t0.Add(2*time.Second + 500*time.Millisecond))
	want := []Second{{T: t0.Unix(), Count: 100, P50Ms: 50, P99Ms: 99, MaxMs: 100}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("seconds during second 2 (-want +got):\n%s", diff)
	}

	got = r.seconds(t0.Add(3 * time.Second))
	want = append(want, Second{T: t0.Unix() + 2, Count: 2, P50Ms: 0, P99Ms: 1.5, MaxMs: 1.5})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("seconds after second 2 (-want +got):\n%s", diff)
	}

	// 15 minutes later second 0 is gone, second 2 not yet.
	got = r.seconds(t0.Add(RecentWindow + 2*time.Second))
	if diff := cmp.Diff(want[1:], got); diff != "" {
		t.Errorf("seconds after the window (-want +got):\n%s", diff)
	}
	// A second that reuses a slot replaces it.
	r.add(t0.Add(RecentWindow+2*time.Second), 7*time.Millisecond)
	got = r.seconds(t0.Add(RecentWindow + 3*time.Second))
	want = []Second{{T: t0.Unix() + recentSeconds + 2, Count: 1, P50Ms: 7, P99Ms: 7, MaxMs: 7}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("seconds after a slot is reused (-want +got):\n%s", diff)
	}
}

// TestRecentSample checks that a busy second keeps an exact count and
// maximum and close percentiles from its bounded sample.
func TestRecentSample(t *testing.T) {
	var r recent
	t0 := time.Unix(1_800_000_000, 0)
	const n = 100_000
	for i := range n {
		r.add(t0, time.Duration(i%1000)*time.Millisecond) // uniform over 0..999 ms
	}
	if len(r.cur.sample) != sampleMax {
		t.Fatalf("sample holds %d values, want %d", len(r.cur.sample), sampleMax)
	}
	got := r.seconds(t0.Add(time.Second))
	if len(got) != 1 {
		t.Fatalf("seconds = %v, want one", got)
	}
	s := got[0]
	if s.Count != n || s.MaxMs != 999 {
		t.Errorf("count, max = %d, %v; want %d, 999", s.Count, s.MaxMs, n)
	}
	if s.P50Ms < 400 || s.P50Ms > 600 {
		t.Errorf("p50 = %v ms, want about 500", s.P50Ms)
	}
	if s.P99Ms < 950 {
		t.Errorf("p99 = %v ms, want about 990", s.P99Ms)
	}
}

func TestMergeSeconds(t *testing.T) {
	a := []Second{{T: 10, Count: 2, P50Ms: 1, P99Ms: 5, MaxMs: 5}, {T: 12, Count: 1, P50Ms: 3, P99Ms: 3, MaxMs: 3}}
	b := []Second{{T: 11, Count: 4, P50Ms: 2, P99Ms: 2, MaxMs: 2}, {T: 12, Count: 3, P50Ms: 1, P99Ms: 9, MaxMs: 9}}
	got := mergeSeconds([][]Second{a, b})
	want := []Second{
		{T: 10, Count: 2, P50Ms: 1, P99Ms: 5, MaxMs: 5},
		{T: 11, Count: 4, P50Ms: 2, P99Ms: 2, MaxMs: 2},
		{T: 12, Count: 4, P50Ms: 3, P99Ms: 9, MaxMs: 9},
	}
	if !slices.Equal(got, want) {
		t.Errorf("merge:\n got %+v\nwant %+v", got, want)
	}
	if got := mergeSeconds([][]Second{a}); !slices.Equal(got, a) {
		t.Errorf("one series: %+v, want it unchanged", got)
	}
	if got := mergeSeconds(nil); got != nil {
		t.Errorf("no series: %+v, want nil", got)
	}
}
