package pebblestore_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// listSizes returns the files under dir and their sizes.
func listSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[rel] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// copyExcept copies the files of from into to, leaving out those whose
// name keep says no to.
func copyExcept(t *testing.T, from, to string, keep func(name string) bool) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() || !keep(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenRefusesIncomplete: Open refuses a directory holding a store's
// files without its MANIFEST (a backup's copy cut short), and a backup's
// partial directory without its completion marker, saying what is
// missing, and leaves their files as they were. Pebble would start an
// empty store there and delete them.
func TestOpenRefusesIncomplete(t *testing.T) {
	root := t.TempDir()
	whole := filepath.Join(root, "whole")
	s := open(t, whole)
	var gen task.IDGenerator
	var ts []*task.Task
	for range 200 {
		ts = append(ts, countsTask(&gen, time.Now(), "shop", "", task.Scheduled))
	}
	if _, err := s.Create(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	noManifest := func(n string) bool { return !strings.HasPrefix(n, "MANIFEST-") && !strings.HasPrefix(n, "marker.") }

	for _, tt := range []struct {
		name  string
		dir   string
		keep  func(string) bool
		wants []string
	}{
		{"partial without its marker", filepath.Join(root, "copy.partial"), func(string) bool { return true },
			[]string{"copy.partial is the partial copy of a backup", "completion marker " + store.BackupManifestName + " is missing", "incomplete"}},
		{"no MANIFEST", filepath.Join(root, "copy"), noManifest,
			[]string{"MANIFEST is missing", store.BackupManifestName, "incomplete"}},
		{"no MANIFEST, with a marker", filepath.Join(root, "marked"), func(n string) bool { return noManifest(n) || n == store.BackupManifestName },
			[]string{"MANIFEST is missing", "incomplete"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			copyExcept(t, whole, tt.dir, tt.keep)
			if strings.HasSuffix(tt.name, "with a marker") {
				if err := os.WriteFile(filepath.Join(tt.dir, store.BackupManifestName), []byte(`{}`), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := listSizes(t, tt.dir)
			_, err := pebblestore.Open(pebblestore.Options{Dir: tt.dir})
			if !errors.Is(err, pebblestore.ErrNotStore) {
				t.Fatalf("Open = %v, want ErrNotStore", err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open's error lacks %q: %v", w, err)
				}
			}
			t.Log(err)
			if after := listSizes(t, tt.dir); !maps.Equal(before, after) {
				t.Errorf("files changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}

	t.Run("foreign files", func(t *testing.T) {
		dir := filepath.Join(root, "notes")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := pebblestore.Open(pebblestore.Options{Dir: dir}); !errors.Is(err, pebblestore.ErrNotStore) || !strings.Contains(err.Error(), "notes.txt") {
			t.Errorf("Open = %v, want ErrNotStore naming notes.txt", err)
		}
	})

	t.Run("whole, empty and new", func(t *testing.T) {
		empty := filepath.Join(root, "empty")
		if err := os.MkdirAll(empty, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{whole, empty, filepath.Join(root, "new")} {
			s, err := pebblestore.Open(pebblestore.Options{Dir: dir})
			if err != nil {
				t.Fatalf("Open(%s): %v", dir, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
