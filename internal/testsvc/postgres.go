package testsvc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrivatePostgres is a PostgreSQL server of a test's own on a spare
// loopback port (trust authentication, user postgres, fsync off), for tests
// that stop or restart PostgreSQL without disturbing the shared one.
type PrivatePostgres struct {
	// DSN reaches its postgres database.
	DSN  string
	port int
	data string
	bin  string
	cmd  *exec.Cmd
}

// StartPrivatePostgres initialises and starts a PostgreSQL server in a
// temporary directory; it is stopped (by its pid) when the test ends. It
// skips the test (fails it under CI=true) when PostgreSQL's server binaries
// are not installed. As root (CI), the server runs as the postgres user.
func StartPrivatePostgres(t testing.TB) *PrivatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		NotInstalled(t, "initdb", "apt-get install postgresql", fmt.Errorf("no /usr/lib/postgresql/*/bin/initdb"))
	}
	bin := filepath.Dir(bins[len(bins)-1])
	// Not t.TempDir: its parent is private to this user, and the server
	// may run as another.
	dir, err := os.MkdirTemp("", "toc-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p := &PrivatePostgres{port: ports[0], data: data, bin: bin,
		DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", ports[0])}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// asPostgres is a command run as the postgres user when this process is
// root (PostgreSQL refuses to run as root), else as this user.
func asPostgres(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("postgres"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			cmd.Env = append(os.Environ(), "HOME="+u.HomeDir)
		}
	}
	return cmd
}

// Start starts the server (again, after Stop) and waits until it answers.
func (p *PrivatePostgres) Start(ctx context.Context) error {
	p.cmd = asPostgres(filepath.Join(p.bin, "postgres"), "-D", p.data, "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+filepath.Dir(p.data),
		"-c", "fsync=off", "-c", "max_connections=200")
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, p.DSN)
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d did not answer: %w", p.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server with a fast shutdown (SIGINT; SIGKILL after 10 s).
// Safe to call when it is not running.
func (p *PrivatePostgres) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}
