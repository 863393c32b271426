package httpapi_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

func digestOf(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// withTokens serves s's engine again behind tokens: "admin" reaches every
// app, "shop" app shop only.
func withTokens(t *testing.T, s *server) (admin, shop *client.Client) {
	t.Helper()
	acc, err := httpapi.NewAccess([]string{digestOf("admin")}, map[string][]string{"shop": {digestOf("shop")}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, Access: acc, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(hs.Close)
	return client.New(client.Config{BaseURL: hs.URL, Token: "admin"}), client.New(client.Config{BaseURL: hs.URL, Token: "shop"})
}

// unpack writes a backup stream into dir and returns its manifest.
func unpack(t *testing.T, r io.Reader, dir string) store.BackupManifest {
	t.Helper()
	var m store.BackupManifest
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == store.BackupManifestName {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if m.Files == 0 {
		t.Fatal("the stream has no manifest")
	}
	return m
}

// TestBackupUnderLoad backs up a server while creates go on, restores the
// copy by serving it, and finds there every task acknowledged before the
// backup began; tasks that came due while no server ran fire on start.
func TestBackupUnderLoad(t *testing.T) {
	if backendName != "embedded" {
		t.Skip("a backup is of the embedded store; TestBackupClusterMode covers cluster mode")
	}
	ctx := context.Background()
	rcv := testkit.NewReceiver(t)
	s := startServer(t, "", nil)
	admin, shop := withTokens(t, s)

	// Due once the original has stopped and before the copy starts.
	soon := time.Now().Add(6 * time.Second)
	var due []task.ID
	for i := range 5 {
		tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: "soon-" + string(rune('a'+i)), DueAt: &soon, Target: rcv.Target()})
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, tk.ID)
	}

	var mu sync.Mutex
	var acked []task.ID
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				req := client.ScheduleRequest{App: "load", Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}}
				if w%2 == 0 {
					req.Key = time.Now().Format(time.RFC3339Nano) + "-" + string(rune('a'+w))
				}
				tk, _, err := s.client.Schedule(loadCtx, req)
				if err != nil {
					if loadCtx.Err() == nil {
						t.Errorf("create under load: %v", err)
					}
					return
				}
				mu.Lock()
				acked = append(acked, tk.ID)
				mu.Unlock()
			}
		}()
	}
	defer func() { stopLoad(); wg.Wait() }()
	testkit.WaitFor(t, 10*time.Second, "creates under load", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200
	})

	// Only an admin token may take a backup.
	if _, err := shop.Backup(ctx); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("backup with an app token: %v, want 403", err)
	}

	mu.Lock()
	before := append([]task.ID(nil), acked...)
	mu.Unlock()
	body, err := admin.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	m := unpack(t, body, copyDir)
	body.Close()
	mu.Lock()
	during := len(acked) - len(before)
	mu.Unlock()
	stopLoad()
	wg.Wait()
	if during == 0 {
		t.Error("no create was acknowledged while the backup ran: the load did not overlap it")
	}
	if time.Now().After(soon) {
		t.Fatalf("the backup took until the tasks were due; the test cannot tell who fired them")
	}
	s.stop()
	if n := len(rcv.Deliveries()); n != 0 {
		t.Fatalf("%d deliveries before the tasks were due", n)
	}
	entries, err := os.ReadDir(filepath.Dir(s.dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".backup-") {
			t.Errorf("%s left next to the data directory", e.Name())
		}
	}
	testkit.WaitFor(t, 10*time.Second, "downtime past the due time", func() bool { return time.Now().After(soon) })

	r := startServer(t, copyDir, nil) // the restore: serve the copy
	for _, id := range before {
		if _, err := r.client.Get(ctx, id); err != nil {
			t.Fatalf("task %s, acknowledged before the backup: %v", id, err)
		}
	}
	for _, id := range due {
		waitState(t, r, id, task.Delivered, 10*time.Second)
	}
	t.Logf("%d tasks acknowledged before the backup and %d during it; %d files, %d bytes", len(before), during, m.Files, m.Bytes)
}

// TestBackupClusterMode: a cluster node has no backup of its own (501).
func TestBackupClusterMode(t *testing.T) {
	if backendName == "embedded" {
		t.Skip("cluster backends only")
	}
	s := startServer(t, "", nil)
	_, err := s.client.Backup(context.Background())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusNotImplemented || ce.Code != "not_implemented" {
		t.Fatalf("backup of a cluster node: %v, want 501 not_implemented", err)
	}
}

func isStatus(err error, status int) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == status
}
