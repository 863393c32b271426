package suite

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/bench/report"
	"github.com/toc-dev/toc/bench/storesize"
)

// machine describes this machine, toc's commit and the peers' and
// services' versions. What it cannot read stays empty.
func (s *suite) machine(ctx context.Context, loadBefore string) report.Machine {
	c := &s.cfg
	m := report.Machine{
		CPUs:       runtime.NumCPU(),
		CPUModel:   procField("/proc/cpuinfo", "model name", ":"),
		OS:         strings.TrimSpace(readString("/proc/sys/kernel/ostype") + " " + readString("/proc/sys/kernel/osrelease")),
		Go:         runtime.Version(),
		Toc:        s.commit(ctx),
		LoadBefore: loadBefore,
		LoadAfter:  loadAverage(),
	}
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal", ":"), " kB"), 10, 64); err == nil {
		m.MemoryBytes = kb << 10
	}
	v := peerVersions(c.Root, "github.com/hibiken/asynq", "github.com/riverqueue/river",
		"github.com/riverqueue/river/riverdriver/riverpgxv5", "github.com/jackc/pgx/v5")
	m.Asynq, m.River = v["github.com/hibiken/asynq"], v["github.com/riverqueue/river"]
	m.RiverPGXv5, m.PGX = v["github.com/riverqueue/river/riverdriver/riverpgxv5"], v["github.com/jackc/pgx/v5"]

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r := storesize.OpenRedis([]string{peersRedis}, "")
	m.Redis, m.RedisAppendOnly, _ = r.Version(ctx)
	r.Close()
	m.Postgres, _ = storesize.PostgresVersion(ctx, c.PGURL)
	return m
}

// commit is toc's short commit, with " + uncommitted changes" when the
// working tree differs from it, or "unknown".
func (s *suite) commit(ctx context.Context) string {
	if s.cfg.Root == "" {
		return "unknown"
	}
	git := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", s.cfg.Root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	commit, err := git("rev-parse", "--short", "HEAD")
	if err != nil || commit == "" {
		return "unknown"
	}
	if st, err := git("status", "--porcelain"); err == nil && st != "" {
		commit += " + uncommitted changes"
	}
	return commit
}

// loadAverage is the 1, 5 and 15 min load averages from /proc/loadavg.
func loadAverage() string {
	f := strings.Fields(readString("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// procField is the value of the first "name SEP value" line of a /proc
// file, trimmed.
func procField(path, name, sep string) string {
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}
