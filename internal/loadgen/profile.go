package loadgen

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// StartCPUProfile starts a CPU profile of this process to path ("": none)
// and returns what stops it: toc bench's and the baselines' --cpuprofile.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// WriteHeapProfile writes the process's allocations profile to path: toc
// bench's and the baselines' --memprofile.
func WriteHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("allocations profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("allocations profile: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("allocations profile: %w", err)
	}
	return nil
}

// StartTrace starts a Go execution trace of this process to path ("":
// none) and returns what stops it: toc bench's --trace, to see what a
// request waits on (go tool trace).
func StartTrace(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}
