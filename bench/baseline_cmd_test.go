package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// runBaselineCmd runs the baseline command with args and returns its
// stdout and stderr.
func runBaselineCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	err = runBaseline(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestBaseline: the fire and schedule workloads with no toc.
func TestBaseline(t *testing.T) {
	t.Parallel()
	type result struct {
		System   string               `json:"system"`
		Variant  string               `json:"variant"`
		Workload string               `json:"workload"`
		N        int                  `json:"n"`
		Fired    int                  `json:"fired"`
		Missing  int                  `json:"missing"`
		Early    int                  `json:"early"`
		Rate     float64              `json:"schedule_per_sec"`
		Drain    float64              `json:"drain_per_sec"`
		Clients  int                  `json:"concurrency"`
		Dup      int                  `json:"duplicates"`
		Cost     *struct{ Fires int } `json:"cost"`
		Notes    []string             `json:"notes"`
	}
	run := func(args ...string) result {
		t.Helper()
		stdout, stderr, err := runBaselineCmd(t, append([]string{"--json"}, args...)...)
		if err != nil {
			t.Fatalf("%q: %v\nstderr: %s", args, err, stderr)
		}
		var r result
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
		}
		return r
	}
	fire := run("--workload", "fire", "--n", "200", "--spread", "500ms", "--lead", "500ms")
	if fire.System != "baseline" || fire.Variant != "timers + HTTP push" || fire.Fired != 200 || fire.Missing != 0 || fire.Early != 0 ||
		fire.Cost == nil || fire.Cost.Fires != 200 {
		t.Errorf("fire baseline %+v, want all 200 fired by the timers, none early, with the cost", fire)
	}
	for _, batch := range []string{"1", "100"} {
		r := run("--workload", "schedule", "--n", "300", "--batch", batch)
		if r.System != "baseline" || r.Variant != "HTTP + log fsync, group commit" || r.N != 300 || r.Rate <= 0 ||
			!slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "requests made durable by") }) {
			t.Errorf("schedule baseline, batch %s: %+v, want 300 accepted and the fsyncs in the notes", batch, r)
		}
	}
	ceil := run("--workload", "ceiling", "--duration", "200ms", "--concurrency", "4")
	if ceil.System != "baseline" || ceil.Workload != "ceiling" || ceil.Clients != 4 || ceil.N < 1 || ceil.Fired != ceil.N || ceil.Drain <= 0 ||
		ceil.Cost == nil || ceil.Cost.Fires != ceil.N {
		t.Errorf("push ceiling %+v, want POSTs from 4 senders, their rate and their cost", ceil)
	}
	pull := run("--pull", "--workload", "fire", "--n", "500", "--spread", "0s", "--lead", "500ms", "--consumers", "2")
	if pull.System != "baseline" || !strings.HasPrefix(pull.Variant, "pull, ") || pull.Fired != 500 || pull.Missing != 0 || pull.Dup != 0 ||
		pull.Drain <= 0 || pull.Cost == nil || pull.Cost.Fires != 500 ||
		!slices.ContainsFunc(pull.Notes, func(n string) bool { return strings.Contains(n, "500 tasks claimed, 500 acked") }) {
		t.Errorf("pull baseline %+v, want 500 claimed and acked once each, the drain rate and the cost", pull)
	}
}

func TestBaselineUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "pending"}, "--workload must be fire, schedule or ceiling"},
		{[]string{"--workload", "ceiling", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"--duration", "1s"}, "--duration is for --workload ceiling"},
		{[]string{"--pull", "--workload", "schedule"}, "--pull is for --workload fire"},
		{[]string{"--n", "0"}, "--n must be at least 1"},
		{[]string{"--batch", "1001"}, "--batch must be between 1 and 1000"},
		{[]string{"--max-wait", "-1s"}, "must not be negative"},
		{[]string{"--embedded"}, "flag provided but not defined: -embedded"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, _, err := runBaselineCmd(t, tc.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

func TestBaselineHelp(t *testing.T) {
	t.Parallel()
	_, stderr, err := runBaselineCmd(t, "-h")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: bash bench/run.sh baseline [flags]", "push ceiling", "-workload", "-pull"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("-h lacks %q:\n%s", want, stderr)
		}
	}
}
