package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/testkit"
)

// TestServeConnectionCap: toc serve wires its connection cap (issue 21,
// finding 2): with --max-connections 4, four clients that keep their
// connections idle do not keep a fifth out, and the reclaim is counted.
func TestServeConnectionCap(t *testing.T) {
	c := startChild(t, filepath.Join(t.TempDir(), "data"), "--max-connections", "4", "--max-connections-per-client", "4")
	addr := strings.TrimPrefix(c.url, "http://")
	for i := range 4 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: toc\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("idle client %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	// Every new request opens a new connection; each finds room once the
	// server has marked the idle ones idle (just after their answers).
	for i := range 3 {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("new client %d beside 4 idle connections", i), func() bool {
			resp, err := hc.Get(c.url + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return true
		})
	}
	resp, err := http.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "toc_http_connections_reclaimed_total") ||
		strings.Contains(string(body), "toc_http_connections_reclaimed_total 0\n") {
		t.Errorf("no reclaim counted:\n%s", grepLines(string(body), "toc_http_connections"))
	}
}

// TestAllowedOriginsReload: a web page of another origin may write only
// once the config file allows its origin, and a reload applies it.
func TestAllowedOriginsReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	if err := os.WriteFile(cfg, []byte("defaults:\n  target: {pull: {}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg, "--config-check", "50ms")
	post := func() int {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", c.url+"/v1/tasks",
			strings.NewReader(`{"app":"shop","delay":"1h"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://localhost:5173")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != http.StatusForbidden {
		t.Fatalf("a write from another origin: %d, want 403", code)
	}
	// Written again on every try: the server's file watch takes its first
	// look at the file some time after it starts serving.
	testkit.WaitFor(t, 10*time.Second, "the allowed origin's write", func() bool {
		if err := os.WriteFile(cfg, []byte("defaults:\n  target: {pull: {}}\nallowed_origins: [\"http://localhost:5173\"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return post() == http.StatusCreated
	})
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
