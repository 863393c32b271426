package suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// peersDir is the peers' module, under the repository's root.
const peersDir = "bench/peers"

// buildPeers builds the peers' binary into the work directory.
func (s *suite) buildPeers(ctx context.Context) error {
	fmt.Fprintln(s.cfg.Stderr, "building the peers")
	bin := filepath.Join(s.work, "peers")
	var out bytes.Buffer
	// -mod=mod: the peers module follows the main one through a replace, so
	// its go.sum may need the main module's newest requirements.
	err := runBounded(ctx, s.cfg.RunTimeout, filepath.Join(s.cfg.Root, peersDir), &out, &out, "go", "build", "-mod=mod", "-o", bin, ".")
	if err != nil {
		return fmt.Errorf("suite: build the peers in %s: %w\n%s", peersDir, err, out.Bytes())
	}
	s.peers = bin
	return nil
}

// runPeers runs the fire and schedule workloads through asynq and River; a
// peer whose service does not answer is skipped, and one that fails is
// noted (the machine is shared: a service may be busy).
func (s *suite) runPeers(ctx context.Context) error {
	c := &s.cfg
	db := itoa(c.RedisDB)
	spread := dur(c.FireSpread)
	if answers(ctx, peersRedis) {
		for _, poll := range []string{"defaults", "tight"} {
			if err := s.benchPeer(ctx, "--system", "asynq", "--poll", poll, "--redis-db", db, "--workload", "fire", "--n", itoa(c.PeerFireN), "--spread", spread); err != nil {
				return err
			}
		}
		if err := s.benchPeer(ctx, "--system", "asynq", "--redis-db", db, "--workload", "schedule", "--n", itoa(c.PeerSingleN), "--batch", "1"); err != nil {
			return err
		}
		if err := s.benchPeer(ctx, "--system", "asynq", "--redis-db", db, "--workload", "schedule", "--n", itoa(c.PeerBatchN), "--batch", "1000"); err != nil {
			return err
		}
	} else {
		s.skip("skipped asynq: Redis on %s did not answer", peersRedis)
	}
	u, _ := url.Parse(c.PGURL) // checked by Validate
	pg := u.Host
	if u.Port() == "" {
		pg = net.JoinHostPort(u.Hostname(), "5432")
	}
	if answers(ctx, pg) {
		for _, poll := range []string{"defaults", "tight"} {
			if err := s.benchPeer(ctx, "--system", "river", "--poll", poll, "--pg", c.PGURL, "--workload", "fire", "--n", itoa(c.PeerFireN), "--spread", spread); err != nil {
				return err
			}
		}
		if err := s.benchPeer(ctx, "--system", "river", "--pg", c.PGURL, "--workload", "schedule", "--n", itoa(c.PeerSingleN), "--batch", "1"); err != nil {
			return err
		}
		if err := s.benchPeer(ctx, "--system", "river", "--pg", c.PGURL, "--workload", "schedule", "--n", itoa(c.PeerBatchN), "--batch", "1000"); err != nil {
			return err
		}
	} else {
		s.skip("skipped river: PostgreSQL on %s did not answer", pg)
	}
	return nil
}

// benchPeer runs the peers' binary with args and --json. A failure is
// noted; only a done ctx is returned.
func (s *suite) benchPeer(ctx context.Context, args ...string) error {
	shown := "(cd " + peersDir + " && go run . " + strings.Join(args, " ") + ")"
	r, stderr, err := s.runJSON(ctx, shown, s.peers, "", append(args, "--json")...)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.skip("failed: `%s`: %s", shown, oneLine(stderrOr(stderr, err), 300))
		return nil
	}
	s.record(r)
	return nil
}

// answers reports whether something accepts TCP connections at addr.
func answers(ctx context.Context, addr string) bool {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// peerVersions reads the versions of modules from the peers' go.mod: the
// ones `go list -m` gives, as the peers replace only toc itself.
func peerVersions(root string, mods ...string) map[string]string {
	v := map[string]string{}
	b, err := os.ReadFile(filepath.Join(root, peersDir, "go.mod"))
	if err != nil {
		return v
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 {
			for _, m := range mods {
				if f[0] == m {
					v[m] = f[1]
				}
			}
		}
	}
	return v
}
