package testsvc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a three-master Redis Cluster of local redis-server
// processes that a test run started and will stop.
type RedisCluster struct {
	Addrs []string
	procs []*exec.Cmd
	dir   string
}

// StartRedisCluster starts three redis-server processes with
// --cluster-enabled on free loopback ports under dir and joins them with
// `redis-cli --cluster create`. Stop ends exactly those processes.
func StartRedisCluster(ctx context.Context, dir string) (*RedisCluster, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found (apt-get install redis-server): %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	rc := &RedisCluster{dir: dir}
	for i, port := range ports {
		nd := filepath.Join(dir, "n"+strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			rc.Stop()
			return nil, err
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nd, "nodes.conf"),
			"--dir", nd, "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--logfile", filepath.Join(nd, "redis.log"))
		if err := cmd.Start(); err != nil {
			rc.Stop()
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		rc.procs = append(rc.procs, cmd)
		rc.Addrs = append(rc.Addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	for _, a := range rc.Addrs {
		if err := waitPing(ctx, a); err != nil {
			rc.Stop()
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, rc.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		rc.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Wait until every node agrees the cluster is up.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && c.Set(ctx, "toc-probe", "1", time.Second).Err() == nil {
			return rc, nil
		}
		if time.Now().After(deadline) {
			rc.Stop()
			return nil, fmt.Errorf("redis cluster not ready: %v %q", err, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the processes StartRedisCluster started, by their pids.
func (rc *RedisCluster) Stop() {
	for _, p := range rc.procs {
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	}
	rc.procs = nil
}

// FreePorts returns n distinct free loopback ports: each is held until all
// are picked, so they differ.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server at %s did not start", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
