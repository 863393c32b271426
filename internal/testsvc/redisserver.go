package testsvc

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PrivateRedis is a redis-server of a test's own on a spare loopback port,
// for tests that stop or restart Redis without disturbing the shared one.
// It keeps nothing on disk, as the shared one.
type PrivateRedis struct {
	Addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartPrivateRedis starts a redis-server on a free loopback port; it is
// stopped (by its pid) when the test ends. It skips the test (fails it under
// CI=true) when redis-server is not installed.
func StartPrivateRedis(t testing.TB) *PrivateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		NotInstalled(t, "redis-server", "apt-get install redis-server", err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	r := &PrivateRedis{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), port: ports[0], dir: t.TempDir()}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Start starts the server again after Stop, on the same port.
func (r *PrivateRedis) Start(ctx context.Context) error {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", r.dir+"/redis.log")
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	return waitPing(ctx, r.Addr)
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s); its data is
// gone. Safe to call when it is not running.
func (r *PrivateRedis) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	r.cmd = nil
}
