package suite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toc-dev/toc/bench/storesize"
)

// clearTimeout bounds clearing the cluster's database and keys, also after
// the suite's context is done.
const clearTimeout = 30 * time.Second

// cluster runs each workload on a fresh cluster of each node count, over one
// PostgreSQL and one Redis.
func (s *suite) cluster(ctx context.Context) error {
	c := &s.cfg
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := storesize.PostgresVersion(pctx, c.PGURL); err != nil {
		s.skip("skipped toc cluster: PostgreSQL at %s did not answer", c.PGURL)
		return ctx.Err()
	}
	r := storesize.OpenRedis([]string{c.ClusterRedis}, c.ClusterPrefix)
	err := r.Ping(pctx)
	r.Close()
	if err != nil {
		s.skip("skipped toc cluster: Redis at %s did not answer", c.ClusterRedis)
		return ctx.Err()
	}
	for _, nodes := range c.ClusterNodes {
		runs := [][]string{
			// With the Redis and the database: the cost per fire.
			{"--workload", "fire", "--n", itoa(c.ClusterFireN), "--spread", dur(c.ClusterFireSpread), "--lead", dur(c.ClusterFireLead), "--max-wait", dur(c.ClusterMaxWait),
				"--redis", c.ClusterRedis, "--sql", c.clusterDSN()},
			{"--workload", "schedule", "--n", itoa(c.ClusterSingleN), "--batch", "1", "--concurrency", "16", "--hold", dur(c.ClusterSingleHold), "--max-wait", dur(c.ClusterMaxWait)},
			{"--workload", "schedule", "--n", itoa(c.ClusterBatchN), "--batch", "1000", "--concurrency", itoa(BatchConcurrency), "--hold", dur(c.ClusterBatchHold), "--max-wait", dur(c.ClusterMaxWait)},
		}
		names := []string{"fire", "single", "batch"}
		if nodes == 1 {
			runs = append(runs, []string{"--workload", "pending", "--n", itoa(c.ClusterPendingN),
				"--redis", c.ClusterRedis, "--redis-prefix", c.ClusterPrefix, "--sql", c.clusterDSN()})
			names = append(names, "pending")
		}
		for i, args := range runs {
			if err := s.clusterRun(ctx, nodes, fmt.Sprintf("c%d-%s", nodes, names[i]), args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// clusterRun runs `toc bench ARGS` against a fresh cluster of nodes nodes,
// and stops it and clears its database and keys afterwards, also when it
// fails. It returns an error only when ctx is done.
func (s *suite) clusterRun(ctx context.Context, nodes int, name string, args ...string) error {
	label := fmt.Sprintf("cluster, %d node", nodes)
	if nodes > 1 {
		label += "s"
	}
	servers, err := s.clusterUp(ctx, nodes, name)
	defer s.clusterDown(ctx, servers, name)
	if err != nil {
		s.skip("skipped toc %s, %s: %v", label, name, err)
		fmt.Fprintf(s.cfg.Stderr, "bench suite: %s, %s: %v\n", label, name, err)
		return ctx.Err()
	}
	urls := make([]string, len(servers))
	pids := make([]string, len(servers))
	for i, srv := range servers {
		urls[i] = srv.addr
		pids[i] = itoa(srv.pid())
	}
	return s.benchToc(ctx, label, append([]string{"--server", strings.Join(urls, ","), "--server-pid", strings.Join(pids, ",")}, args...)...)
}

// clusterUp clears the cluster's database and keys, creates the database
// and starts nodes nodes over them, each on its own free port; it returns
// once every node answers /readyz. The servers it started are returned
// also with an error, to be stopped. Logs go to the work directory as
// NAME.nodeI.err.
func (s *suite) clusterUp(ctx context.Context, nodes int, name string) ([]*server, error) {
	c := &s.cfg
	if err := s.clusterClear(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, clearTimeout)
	defer cancel()
	if err := storesize.CreateDatabase(cctx, c.PGURL, c.ClusterDB); err != nil {
		return nil, err
	}
	args := []string{"--listen", "127.0.0.1:0", "--sql", c.clusterDSN(), "--redis", c.ClusterRedis,
		"--redis-prefix", c.ClusterPrefix, "--log-level", "warn"}
	var servers []*server
	for i := range nodes {
		srv, err := startServe(c.Exe, filepath.Join(s.work, fmt.Sprintf("%s.node%d.err", name, i)), args...)
		if err != nil {
			return servers, err
		}
		servers = append(servers, srv)
	}
	s.command(fmt.Sprintf("toc serve %s   # %d node(s), fresh database and prefix", strings.Join(args, " "), nodes))
	for i, srv := range servers {
		if _, err := srv.ready(ctx, StartTimeout); err != nil {
			tail, _ := os.ReadFile(filepath.Join(s.work, fmt.Sprintf("%s.node%d.err", name, i)))
			if len(tail) > 300 {
				tail = tail[len(tail)-300:]
			}
			return servers, fmt.Errorf("node %d of %d: %v: %s", i+1, nodes, err, oneLine(string(tail), 300))
		}
	}
	return servers, nil
}

// clusterDown stops the nodes, notes what they left in Redis and logged,
// and drops the database and deletes the keys.
func (s *suite) clusterDown(ctx context.Context, servers []*server, name string) {
	c := &s.cfg
	if err := stopAll(servers); err != nil {
		s.rep.NodeNotes = append(s.rep.NodeNotes, fmt.Sprintf("%s: %v", name, err))
	}
	// What the run left in Redis: once every task is delivered (or far in
	// the future), the store and prepare queues should be empty.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clearTimeout)
	defer cancel()
	if len(servers) > 0 {
		r := storesize.OpenRedis([]string{c.ClusterRedis}, c.ClusterPrefix)
		store, prepare, err := r.Queues(qctx)
		r.Close()
		if err == nil && store+prepare > 0 {
			s.rep.NodeNotes = append(s.rep.NodeNotes, fmt.Sprintf("%s: when the nodes stopped, %d members were left in Redis store queues and %d in prepare queues (entries a promotion scan wrote back as their task finished; a running owner drops each when it comes due, a lease's end at most, about 15 s)", name, store, prepare))
		}
	}
	for i := range servers {
		path := filepath.Join(s.work, fmt.Sprintf("%s.node%d.err", name, i))
		log, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if c.ClusterLogs != "" {
			if err := copyLog(path, c.ClusterLogs); err != nil {
				s.rep.NodeNotes = append(s.rep.NodeNotes, fmt.Sprintf("%s, node %d: keeping its log: %v", name, i+1, err))
			}
		}
		if lines := countLines(string(log)); lines > 0 {
			s.rep.NodeNotes = append(s.rep.NodeNotes, fmt.Sprintf("%s, node %d: %d log lines at warn or above; most frequent: %s", name, i+1, lines, logSummary(string(log))))
		}
	}
	if err := s.clusterClear(ctx); err != nil {
		s.skip("clearing the cluster's database and keys after %s: %v", name, err)
	}
}

// clusterClear drops the cluster's database and deletes the keys under its
// prefix, within clearTimeout even when ctx is done.
func (s *suite) clusterClear(ctx context.Context) error {
	c := &s.cfg
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clearTimeout)
	defer cancel()
	err := storesize.DropDatabase(ctx, c.PGURL, c.ClusterDB)
	r := storesize.OpenRedis([]string{c.ClusterRedis}, c.ClusterPrefix)
	_, rerr := r.DeletePrefix(ctx)
	r.Close()
	return errors.Join(err, rerr)
}

func copyLog(path, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, filepath.Base(path)))
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return cmp.Or(err, out.Close())
}

// countLines counts the lines of log that are not empty.
func countLines(log string) int {
	n := 0
	for line := range strings.Lines(log) {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

var logMsg = regexp.MustCompile(`msg=("[^"]*"|[^ ]*)`)

// logSummary is the three most frequent messages of a node's log (slog text
// lines, or the error it exited with), with their counts: "msg (x12); ...".
func logSummary(log string) string {
	counts := map[string]int{}
	for line := range strings.Lines(log) {
		line = strings.TrimRight(line, "\r\n")
		for _, m := range logMsg.FindAllStringSubmatch(line, -1) {
			counts[strings.ReplaceAll(m[1], `"`, "")]++
		}
		if strings.HasPrefix(line, "toc: ") || strings.HasPrefix(line, "panic: ") {
			counts[line]++
		}
	}
	msgs := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(counts[b]-counts[a], strings.Compare(a, b))
	})
	parts := make([]string, 0, 3)
	for _, m := range msgs[:min(3, len(msgs))] {
		parts = append(parts, fmt.Sprintf("%s (x%d)", m, counts[m]))
	}
	return strings.Join(parts, "; ")
}
