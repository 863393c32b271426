package pebblestore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// untar writes the checkpoint stream r into dir and returns its manifest,
// failing the test unless the manifest is the last entry and counts the
// files before it.
func untar(t *testing.T, r io.Reader, dir string) store.BackupManifest {
	t.Helper()
	tr := tar.NewReader(r)
	var m store.BackupManifest
	files, seenManifest := 0, false
	var bytes int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if seenManifest {
			t.Fatalf("entry %s after the manifest", h.Name)
		}
		if h.Name == store.BackupManifestName {
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
			seenManifest = true
			continue
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
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files++
		bytes += int64(len(b))
	}
	if !seenManifest {
		t.Fatal("no manifest at the end of the stream")
	}
	if m.Files != files || m.Bytes != bytes {
		t.Fatalf("manifest says %d files, %d bytes; the stream had %d, %d", m.Files, m.Bytes, files, bytes)
	}
	return m
}

// TestCheckpoint takes a checkpoint while creates and unsynced updates go
// on, and finds in the copy every write that returned before it began.
func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, filepath.Join(root, "data"))
	defer s.Close()
	var gen task.IDGenerator
	now := time.Now().UTC().Truncate(time.Millisecond)

	// An update the fire path would make, without a sync: in the copy too.
	first := countsTask(&gen, now, "shop", "k-0", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{first}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, first.ID, &store.UpdateOpts{NoSync: true}, func(tk *task.Task) error {
		tk.Attempts = 7
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var acked []task.ID
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tk := countsTask(&gen, now, "shop", "", task.Scheduled)
				if w%2 == 0 {
					tk.Key = tk.ID.String()
				}
				if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, tk.ID)
				mu.Unlock()
			}
		}()
	}
	// Let some creates through first.
	some, cancelSome := context.WithTimeout(ctx, 5*time.Second)
	testkit.Until(some, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200
	})
	cancelSome()
	mu.Lock()
	before := append([]task.ID(nil), acked...)
	mu.Unlock()
	var buf bytes.Buffer
	m, err := s.Checkpoint(ctx, &buf)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if m.Files == 0 || m.Bytes == 0 || m.TakenAt.IsZero() {
		t.Errorf("manifest %+v", m)
	}

	copyDir := filepath.Join(root, "restored")
	got := untar(t, &buf, copyDir)
	if got.Files != m.Files || got.Bytes != m.Bytes {
		t.Errorf("manifest in the stream %+v, returned %+v", got, m)
	}
	// The checkpoint's own directory is gone.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".backup-") {
			t.Errorf("%s left next to the store", e.Name())
		}
	}

	c := open(t, copyDir)
	defer c.Close()
	tk, err := c.Get(ctx, first.ID)
	if err != nil || tk.Attempts != 7 {
		t.Fatalf("the unsynced update: %v, %+v", err, tk)
	}
	for _, id := range before {
		if _, err := c.Get(ctx, id); err != nil {
			t.Fatalf("task %s, acknowledged before the checkpoint: %v", id, err)
		}
	}
	t.Logf("%d tasks acknowledged before the checkpoint, %d files, %d bytes", len(before), m.Files, m.Bytes)
}

// TestCheckpointRemovesStale: a checkpoint directory left by a crash is
// removed by the next checkpoint; a closed store makes none.
func TestCheckpointRemovesStale(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, filepath.Join(root, "data"))
	stale := filepath.Join(root, ".data.backup-0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(stale, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, ".other.backup-0123456789abcdef") // another store's
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale checkpoint directory: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another store's directory was touched: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx, io.Discard); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Checkpoint after Close: %v, want ErrClosed", err)
	}
}

func TestCheckNotInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir)
	if err := pebblestore.CheckNotInUse(dir); !errors.Is(err, pebblestore.ErrInUse) {
		t.Errorf("a store open here: %v, want ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pebblestore.CheckNotInUse(dir); err != nil {
		t.Errorf("a closed store: %v", err)
	}
	if s = open(t, dir); s.Close() != nil { // still opens
		t.Error("close")
	}
}
