// Package e2e_test runs toc as users do: `toc serve` in a child process,
// driven over HTTP, delivering to a webhook receiver in the test. The child
// is this test binary re-executed (see TestMain), so no build step is needed.
package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/cli"
	"github.com/toc-dev/toc/internal/testsvc"
)

const childEnv = "TOC_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// Run as `toc` with the arguments after "--".
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		ctx, stop := signalContext()
		err := cli.Run(ctx, args, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "toc:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := func() int {
		dir, err := os.MkdirTemp("", "toc-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// Children run a real toc binary built without the race detector:
		// it is what users run, and -race would make the load tests measure
		// the detector. Without a go command, the test binary stands in.
		if gobin, err := exec.LookPath("go"); err == nil {
			bin := dir + "/toc"
			cmd := exec.Command(gobin, "build", "-o", bin, "github.com/toc-dev/toc/cmd/toc")
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "build toc for the e2e tests:", err)
				return 1
			}
			tocBinary = bin
		}
		return m.Run()
	}()
	os.Exit(code)
}

// tocBinary is the toc binary children run; empty: the test binary itself
// (see TestMain).
var tocBinary string

// tocCommand returns the command that runs `toc args...`.
func tocCommand(ctx context.Context, args ...string) *exec.Cmd {
	if tocBinary != "" {
		return exec.CommandContext(ctx, tocBinary, args...)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}

// child is a `toc serve` process.
type child struct {
	cmd    *exec.Cmd
	url    string
	done   chan struct{}
	err    error
	stderr *testsvc.LockedBuffer
}

// startChild runs `toc serve --data dir --listen 127.0.0.1:0 extra...` and
// waits until it listens.
func startChild(t *testing.T, dir string, extra ...string) *child {
	t.Helper()
	return startChildEnv(t, nil, dir, extra...)
}

// startChildEnv is startChild with env (NAME=value) added to the child's
// environment.
func startChildEnv(t *testing.T, env []string, dir string, extra ...string) *child {
	t.Helper()
	args := append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	cmd := tocCommand(context.Background(), args...)
	if env != nil {
		cmd.Env = append(cmd.Environ(), env...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{}), stderr: &testsvc.LockedBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	urlCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "toc listening on "); ok {
				urlCh <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case c.url = <-urlCh:
	case <-c.done:
		t.Fatalf("toc serve exited before listening: %v\n%s", c.err, c.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("toc serve did not listen within 30s\n%s", c.stderr)
	}
	return c
}

func (c *child) client() *client.Client { return client.New(client.Config{BaseURL: c.url}) }

// kill ends the child with SIGKILL: no shutdown code runs.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

// terminate sends SIGTERM and returns the exit error and how long it took.
func (c *child) terminate(t *testing.T) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("toc serve still running 30s after SIGTERM")
	}
	return c.err, time.Since(start)
}

// hooks is a webhook receiver that records when each task arrived.
type hooks struct {
	*httptest.Server
	mu    sync.Mutex
	first map[string]time.Time // task id → first arrival
	dueAt map[string]time.Time // task id → Toc-Due-At
	count map[string]int
	bad   []string
}

func newHooks(t *testing.T) *hooks {
	h := &hooks{first: map[string]time.Time{}, dueAt: map[string]time.Time{}, count: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Toc-Task-Id")
		due, err := time.Parse(time.RFC3339Nano, r.Header.Get("Toc-Due-At"))
		h.mu.Lock()
		defer h.mu.Unlock()
		if id == "" || err != nil {
			h.bad = append(h.bad, fmt.Sprintf("bad headers: %v", r.Header))
			return
		}
		if _, ok := h.first[id]; !ok {
			h.first[id] = now
			h.dueAt[id] = due
		}
		h.count[id]++
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hooks) seen(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.first[id]
	return ok
}

// runChild runs `toc args...` to completion and returns its combined output.
func runChild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := tocCommand(ctx, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
