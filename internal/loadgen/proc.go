package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
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

// ClockTicks is the unit of the CPU times and start times in /proc/PID/stat
// and of /proc/uptime's conversion here: USER_HZ, which is 100 on every
// architecture Linux runs toc on (sysconf(_SC_CLK_TCK) says the same; Go
// cannot call it without cgo).
const ClockTicks = 100

// ProcStat is what a process's /proc/PID/stat says of its CPU use.
type ProcStat struct {
	PID, PPID int
	Comm      string
	// Start is when the process started, in clock ticks after boot.
	Start int64
	// CPU is its user and system time so far, of all its threads, in
	// clock ticks (utime + stime; the children's times are not in it).
	CPU int64
}

// ParseStat parses the contents of /proc/PID/stat. The command name is in
// parentheses and may hold spaces and parentheses itself: the fields are
// counted from the last ')'.
func ParseStat(b []byte) (ProcStat, error) {
	var s ProcStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("proc stat: no (comm) in %q", truncate(b, 80))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("proc stat: pid: %w", err)
	}
	s.PID, s.Comm = pid, string(b[open+1:end])
	// After the comm: state (field 3), ppid (4), ... utime (14), stime
	// (15), ... starttime (22); f[0] is field 3.
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 {
		return s, fmt.Errorf("proc stat of %d: %d fields after the command name, want at least 20", pid, len(f))
	}
	var n [4]int64
	for i, at := range [4]int{1, 11, 12, 19} {
		if n[i], err = strconv.ParseInt(string(f[at]), 10, 64); err != nil {
			return s, fmt.Errorf("proc stat of %d: field %d: %w", pid, at+3, err)
		}
	}
	s.PPID, s.CPU, s.Start = int(n[0]), n[1]+n[2], n[3]
	return s, nil
}

func truncate(b []byte, n int) []byte { return b[:min(len(b), n)] }

// ReadProcStat reads /proc/PID/stat (Linux only).
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat: %w", err)
	}
	return ParseStat(b)
}

// ListProcs reads the stat of every process in /proc. Processes that exit
// while it reads are left out.
func ListProcs() ([]ProcStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	procs := make([]ProcStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		s, err := ReadProcStat(pid)
		if err != nil {
			continue // gone since ReadDir, or not readable
		}
		procs = append(procs, s)
	}
	return procs, nil
}

// ProcsNamed returns the pids of the processes whose command name (comm) is
// one of names.
func ProcsNamed(names ...string) ([]int, error) {
	procs, err := ListProcs()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		if slices.Contains(names, p.Comm) {
			pids = append(pids, p.PID)
		}
	}
	return pids, nil
}

// ParseUptime parses /proc/uptime ("12345.67 54321.00") into clock ticks
// since boot, the unit of [ProcStat.Start].
func ParseUptime(b []byte) (int64, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, errors.New("uptime: empty")
	}
	sec, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || sec < 0 {
		return 0, fmt.Errorf("uptime: %q is not a number of seconds", f[0])
	}
	return int64(math.Round(sec * ClockTicks)), nil
}

func readUptime() (int64, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, fmt.Errorf("uptime: %w", err)
	}
	return ParseUptime(b)
}

// PIDsNamed returns those of pids that are running processes named comm.
// A pid of another PID namespace (a service in a container) would name an
// unrelated process here, or none.
func PIDsNamed(pids []int, comm string) []int {
	var named []int
	for _, pid := range pids {
		if s, err := ReadProcStat(pid); err == nil && s.Comm == comm {
			named = append(named, pid)
		}
	}
	return named
}

// ParentNamed returns the parent of the first of pids whose process and
// parent are both named comm (a PostgreSQL postmaster, from the pids of
// its backends and workers), or 0 when there is none.
func ParentNamed(pids []int, comm string) int {
	return parentNamed(pids, comm, ReadProcStat)
}

func parentNamed(pids []int, comm string, read func(int) (ProcStat, error)) int {
	for _, pid := range pids {
		s, err := read(pid)
		if err != nil || s.Comm != comm {
			continue
		}
		if p, err := read(s.PPID); err == nil && p.Comm == comm {
			return p.PID
		}
	}
	return 0
}

// ParseMachineCPU parses /proc/stat into the busy clock ticks of the whole
// machine so far, over all its CPUs: the "cpu" line's user, nice, system,
// irq, softirq and steal (guest time is in user already; idle and iowait
// are not busy).
func ParseMachineCPU(b []byte) (int64, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("/proc/stat: the first line is not the cpu line: %q", truncate(line, 80))
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d of the cpu line: %w", i, err)
		}
		busy += v
	}
	return busy, nil
}

// ReadMachineCPU is the machine's busy clock ticks so far ([ParseMachineCPU]).
func ReadMachineCPU() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("machine cpu: %w", err)
	}
	return ParseMachineCPU(b)
}
