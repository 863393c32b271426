package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toc-dev/toc/client"
)

// server is a `toc serve` the suite started. It is stopped by its pid.
type server struct {
	cmd    *exec.Cmd
	url    *urlWatcher
	addr   string        // set by ready
	exited chan struct{} // closed once it has exited and been waited for
	err    error         // Wait's, once exited is closed
	once   sync.Once
	serr   error // stop's
}

// startServe starts exe serve with args, its stderr to the file errPath.
func startServe(exe, errPath string, args ...string) (*server, error) {
	errFile, err := os.Create(errPath)
	if err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	defer errFile.Close() // the child has its own copy
	s := &server{url: newURLWatcher(), exited: make(chan struct{})}
	s.cmd = exec.Command(exe, append([]string{"serve"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.url, errFile
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("suite: start toc serve: %w", err)
	}
	// Owned by stop, which waits for exited.
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// ready waits until the server has printed its address and answers
// /readyz there, and returns the address: http://127.0.0.1:PORT.
func (s *server) ready(ctx context.Context, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var url string
	select {
	case url = <-s.url.found:
	case <-s.exited:
		return "", fmt.Errorf("exited (%v) before printing its address", s.err)
	case <-ctx.Done():
		return "", fmt.Errorf("no address within %s: %w", timeout, context.Cause(ctx))
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c := client.New(client.Config{BaseURL: url, HTTPClient: hc})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Ready(rctx)
		rcancel()
		if err == nil {
			s.addr = url
			return url, nil
		}
		select {
		case <-tick.C:
		case <-s.exited:
			return "", fmt.Errorf("exited (%v) before it was ready", s.err)
		case <-ctx.Done():
			return "", fmt.Errorf("not ready within %s: %w", timeout, err)
		}
	}
}

// stop sends the server SIGTERM, and SIGKILL if it has not exited
// StopTimeout later, and waits for it. It may be called again.
func (s *server) stop() error {
	s.once.Do(func() { s.serr = stopAll([]*server{s}) })
	return s.serr
}

// stopAll stops the servers together: SIGTERM to all, then waits for each,
// killing the ones still running StopTimeout after the signal. It returns
// an error only if one had to be killed or could not be signalled.
func stopAll(servers []*server) error {
	var errs []error
	for _, s := range servers {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("pid %d: %w", s.pid(), err))
		}
	}
	deadline := time.NewTimer(StopTimeout)
	defer deadline.Stop()
	for _, s := range servers {
		select {
		case <-s.exited:
			continue
		case <-deadline.C:
		}
		// Past the deadline: the timer has fired for every server after
		// this one too.
		if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("pid %d: %w", s.pid(), err))
		}
		<-s.exited
		errs = append(errs, fmt.Errorf("pid %d did not exit within %s of SIGTERM: killed", s.pid(), StopTimeout))
		deadline.Reset(0)
	}
	return errors.Join(errs...)
}

// urlWatcher is a server's stdout: it finds the line "toc listening on URL"
// and sends the URL on found, once.
type urlWatcher struct {
	found chan string // capacity 1
	mu    sync.Mutex  // the exec package writes from one goroutine; to be sure
	buf   []byte
	sent  bool
}

func newURLWatcher() *urlWatcher { return &urlWatcher{found: make(chan string, 1)} }

func (w *urlWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
		if u, ok := strings.CutPrefix(line, "toc listening on "); ok {
			w.found <- u
			w.sent, w.buf = true, nil
			break
		}
	}
	if len(w.buf) > 4096 { // no address in a long line: keep the tail only
		w.buf = w.buf[len(w.buf)-4096:]
	}
	return len(p), nil
}
