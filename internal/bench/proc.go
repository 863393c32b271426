package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
)

// ReadRSS returns the resident memory of process pid, from the VmRSS line
// of /proc/PID/status (Linux only).
func ReadRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "123456 kB"
		if len(f) != 2 || string(f[1]) != "kB" {
			break
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			break
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("read rss: no VmRSS line in /proc/%d/status", pid)
}

// SelfRSS returns this process's resident memory after a garbage collection
// that returns freed memory to the OS, so that garbage does not count.
func SelfRSS() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	return ReadRSS(os.Getpid())
}

// DiskUsage returns the space the files under dir take on disk, as du
// counts it (allocated blocks where the platform says, else sizes).
func DiskUsage(dir string) (int64, error) {
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("disk usage: %w", err)
	}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // a file removed by a compaction while we walk
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		total += allocated(info)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("disk usage of %s: %w", dir, err)
	}
	return total, nil
}
