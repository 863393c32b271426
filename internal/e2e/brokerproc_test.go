package e2e_test

// Brokers of a test's own: a nats-server or a RabbitMQ node (with its epmd)
// on free loopback ports and a data directory under the test's temp dir, that
// the test can crash with SIGKILL and start again on the same ports and data.
// The machine's shared brokers (5672, 4222) are never touched: other
// packages' tests use them at the same time.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/testsvc"
)

// ownerEnv marks every process a brokerProc starts, and the processes those
// start, so that the test can check that none outlives it.
const ownerEnv = "TOC_E2E_BROKER_OWNER"

// brokerProc is one run of a broker program, in a process group of its own
// so that SIGKILL reaches the shell wrapper and the VM it runs alike.
type brokerProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *testsvc.LockedBuffer // stdout and stderr
}

// startBrokerProc runs bin args... with env added to the test's, in dir. It
// is killed when the test ends, if it still runs.
func startBrokerProc(t *testing.T, owner, dir string, env []string, bin string, args ...string) *brokerProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), ownerEnv+"="+owner)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &brokerProc{name: filepath.Base(bin), cmd: cmd, done: make(chan struct{}), out: &testsvc.LockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// The VM's helpers inherit the output pipe: don't let Wait hang on one.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill sends SIGKILL to the process group and waits for its leader. It does
// nothing once the process ended.
func (p *brokerProc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill %s (process group %d): %v", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) still running 10s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

func (p *brokerProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// checkNoLeftovers registers a cleanup, to run after the brokers' own, that
// waits for every process marked with owner to end: the VM's helpers
// (erl_child_setup, inet_gethost, the disk monitor's shell) are in process
// groups of their own and end by themselves once the VM is gone. Any still
// running after 10s fails the test and is killed by its pid.
func checkNoLeftovers(t *testing.T, owner string) {
	t.Helper()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		return // not Linux: nothing to scan
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			left := ownedProcs(owner)
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				for pid, args := range left {
					t.Errorf("process %d (%s) outlived the test; killing it", pid, args)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// ownedProcs returns the pids and command lines of the processes whose
// environment holds ownerEnv=owner.
func ownedProcs(owner string) map[int]string {
	mark := []byte(ownerEnv + "=" + owner + "\x00")
	ents, _ := os.ReadDir("/proc")
	found := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), string(mark)) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		found[pid] = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// freePorts returns n distinct free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := testsvc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// waitListening waits until something accepts TCP connections on addr. It
// fails the test if p exits first or within passes.
func waitListening(t *testing.T, p *brokerProc, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if p.exited() {
			t.Fatalf("%s exited before listening on %s:\n%s", p.name, addr, tail(p.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after %s:\n%s", p.name, addr, within, tail(p.out.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// natsServer is a nats-server with JetStream of the test's own.
type natsServer struct {
	bin  string
	addr string // 127.0.0.1:port
	url  string
	dir  string // JetStream store
	own  string // ownerEnv's value
	p    *brokerProc
}

const natsInstall = "apt-get install nats-server (or put nats-server on PATH)"

// startNATS starts nats-server -js on a free loopback port with its store in
// a temp dir.
func startNATS(t *testing.T) *natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			testsvc.NotInstalled(t, "nats-server", natsInstall, err)
		}
		bin = "/usr/sbin/nats-server"
	}
	s := &natsServer{bin: bin, dir: t.TempDir(), own: testsvc.Token()}
	checkNoLeftovers(t, s.own)
	s.addr = "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
	s.url = "nats://" + s.addr
	s.start(t)
	return s
}

// start runs the server (again) on the same port and store.
func (s *natsServer) start(t *testing.T) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	s.p = startBrokerProc(t, s.own, s.dir, nil, s.bin, "-a", host, "-p", port, "-js", "-sd", s.dir)
	waitListening(t, s.p, s.addr, 30*time.Second)
}

// rabbitNode is a RabbitMQ node of the test's own, with an epmd of its own
// (the node would otherwise start a daemon epmd that outlives the test).
type rabbitNode struct {
	bin  string
	addr string // AMQP listener, 127.0.0.1:port
	url  string
	dir  string // data, logs, config, cookie
	env  []string
	own  string // ownerEnv's value
	epmd *brokerProc
	p    *brokerProc
}

const rabbitInstall = "apt-get install rabbitmq-server (the test runs its own node; set TOC_TEST_RABBITMQ_SERVER to the rabbitmq-server script if it is elsewhere)"

// rabbitServer finds the rabbitmq-server script itself: Debian's
// /usr/sbin/rabbitmq-server is a wrapper that switches to the rabbitmq user
// and its environment.
func rabbitServer() (string, error) {
	if p := os.Getenv("TOC_TEST_RABBITMQ_SERVER"); p != "" {
		return p, nil
	}
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err == nil {
		return "/usr/lib/rabbitmq/bin/rabbitmq-server", nil
	}
	return exec.LookPath("rabbitmq-server")
}

// startRabbit starts a RabbitMQ node on free loopback ports (AMQP,
// distribution, epmd) with no plugins, its data, logs, config and Erlang
// cookie under a temp dir, and waits until it takes AMQP connections.
func startRabbit(t *testing.T) *rabbitNode {
	t.Helper()
	bin, err := rabbitServer()
	if err != nil {
		testsvc.NotInstalled(t, "rabbitmq-server", rabbitInstall, err)
	}
	epmdBin, err := exec.LookPath("epmd")
	if err != nil {
		testsvc.NotInstalled(t, "epmd (Erlang)", rabbitInstall, err)
	}
	n := &rabbitNode{bin: bin, dir: t.TempDir(), own: testsvc.Token()}
	checkNoLeftovers(t, n.own)
	ports := freePorts(t, 3)
	amqpPort, distPort, epmdPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), strconv.Itoa(ports[2])
	n.addr = "127.0.0.1:" + amqpPort
	n.url = "amqp://guest:guest@" + n.addr + "/"
	files := map[string]string{
		"rabbitmq.conf":     "listeners.tcp.default = " + n.addr + "\n",
		"enabled_plugins":   "[].\n", // no management plugin on 15672
		"rabbitmq-env.conf": "",      // not /etc/rabbitmq's, which names the shared node
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n.env = []string{
		"HOME=" + n.dir, // the Erlang cookie
		"RABBITMQ_NODENAME=toc-e2e-" + n.own + "@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + amqpPort,
		"RABBITMQ_DIST_PORT=" + distPort,
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		// None of the machine's drop-ins and advanced.config.
		"RABBITMQ_CONFIG_FILES=" + filepath.Join(n.dir, "conf.d"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_LOGS=-", // to stdout: the test shows it when the node fails
		"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "rabbitmq.pid"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"ERL_EPMD_PORT=" + epmdPort,
	}
	n.epmd = startBrokerProc(t, n.own, n.dir, n.env, epmdBin, "-address", "127.0.0.1", "-port", epmdPort)
	waitListening(t, n.epmd, "127.0.0.1:"+epmdPort, 10*time.Second)
	n.start(t)
	return n
}

// start runs the node (again) on the same ports and data, and waits until
// it takes AMQP connections: 5–15 s on a loaded machine.
func (n *rabbitNode) start(t *testing.T) {
	t.Helper()
	began := time.Now()
	n.p = startBrokerProc(t, n.own, n.dir, n.env, n.bin)
	waitListening(t, n.p, n.addr, 45*time.Second)
	t.Logf("RabbitMQ node %s up in %s", n.addr, time.Since(began).Round(time.Millisecond))
}

// retryUntil calls f until it succeeds or ctx ends: a client of a broker that
// has just started.
func retryUntil[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
