package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/testkit"
)

// tarEntry is one entry of a fake backup stream.
type tarEntry struct {
	name string
	body string
	dir  bool
	link bool
}

// backupStream makes a tar stream of entries, with a manifest counting the
// files at the end unless manifest is nil; a non-nil manifest is written
// as given.
func backupStream(t *testing.T, entries []tarEntry, manifest *store.BackupManifest) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case e.link:
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if manifest != nil {
		b, _ := json.Marshal(manifest)
		if err := tw.WriteHeader(&tar.Header{Name: store.BackupManifestName, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// backupServer answers GET /v1/admin/backup with status and body, and
// counts the requests.
func backupServer(t *testing.T, status int, body []byte) (*httptest.Server, *int) {
	t.Helper()
	n := new(int)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*n++
		if r.Method != "GET" || r.URL.Path != "/v1/admin/backup" {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer admin-secret" {
			t.Errorf("Authorization %q", got)
		}
		if status != 200 {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s, n
}

func TestBackup(t *testing.T) {
	t.Parallel()
	taken := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	files := []tarEntry{{name: "000002.log", body: "wal"}, {name: "MANIFEST-000001", body: "manifest!"}, {name: "sub/", dir: true}, {name: "sub/x.sst", body: strings.Repeat("s", 2000)}}
	stream := backupStream(t, files, &store.BackupManifest{Files: 3, Bytes: 2012, TakenAt: taken})
	s, _ := backupServer(t, 200, stream)
	dir := filepath.Join(t.TempDir(), "copy")
	stdout, stderr, err := runCLI(t, map[string]string{EnvServer: s.URL, EnvToken: "admin-secret"}, "backup", "--to", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout, "backed up to "+dir+": 3 files, 2.0 KiB (2012 bytes), taken at 2026-03-01T12:00:00Z (in ") || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	for name, want := range map[string]string{"000002.log": "wal", "MANIFEST-000001": "manifest!", "sub/x.sst": strings.Repeat("s", 2000)} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	var m store.BackupManifest
	b, err := os.ReadFile(filepath.Join(dir, store.BackupManifestName))
	if err != nil || json.Unmarshal(b, &m) != nil || m.Files != 3 || !m.TakenAt.Equal(taken) {
		t.Errorf("manifest in the copy: %s, %v", b, err)
	}
	if _, err := os.Stat(dir + ".partial"); !os.IsNotExist(err) {
		t.Errorf("%s.partial is left: %v", dir, err)
	}
}

// TestBackupFails: whatever goes wrong, neither DIR nor DIR.partial is left.
func TestBackupFails(t *testing.T) {
	t.Parallel()
	good := []tarEntry{{name: "000002.log", body: "wal"}}
	tests := []struct {
		name   string
		status int
		body   []byte
		want   string
	}{
		{"cluster mode", 501, []byte(`{"error":{"code":"not_implemented","message":"toc: this server's store makes no backups of its own (cluster mode)"}}`), "cluster mode"},
		{"app token", 403, []byte(`{"error":{"code":"forbidden","message":"this route reaches every app's tasks: it takes an admin token"}}`), "admin token"},
		{"cut short", 200, backupStream(t, good, nil), "cut short"},
		{"cut mid-file", 200, backupStream(t, []tarEntry{{name: "a.sst", body: strings.Repeat("x", 5000)}}, nil)[:2000], "unexpected EOF"},
		{"manifest mismatch", 200, backupStream(t, good, &store.BackupManifest{Files: 2, Bytes: 3}), "its manifest says 2 of 3"},
		{"entry after the manifest", 200, func() []byte {
			b := backupStream(t, good, &store.BackupManifest{Files: 1, Bytes: 3})
			return append(b[:len(b)-1024], backupStream(t, []tarEntry{{name: "late", body: "x"}}, nil)...)
		}(), `entry ("late") after its manifest`},
		{"escape", 200, backupStream(t, []tarEntry{{name: "../evil", body: "x"}}, &store.BackupManifest{Files: 1, Bytes: 1}), `named "../evil", outside the directory`},
		{"absolute", 200, backupStream(t, []tarEntry{{name: "/tmp/evil", body: "x"}}, &store.BackupManifest{Files: 1, Bytes: 1}), "outside the directory"},
		{"symlink", 200, backupStream(t, []tarEntry{{name: "link", link: true}}, &store.BackupManifest{}), "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := backupServer(t, tt.status, tt.body)
			root := t.TempDir()
			dir := filepath.Join(root, "copy")
			_, _, err := runCLI(t, map[string]string{EnvServer: s.URL, EnvToken: "admin-secret"}, "backup", "--to", dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			entries, _ := os.ReadDir(root)
			if len(entries) != 0 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

func TestBackupRefusesExisting(t *testing.T) {
	t.Parallel()
	s, n := backupServer(t, 200, nil)
	env := map[string]string{EnvServer: s.URL, EnvToken: "admin-secret"}
	root := t.TempDir()
	dir := filepath.Join(root, "copy")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, env, "backup", "--to", dir); err == nil || !strings.Contains(err.Error(), "exists: give a directory that does not exist yet") {
		t.Errorf("existing DIR: %v", err)
	}
	other := filepath.Join(root, "other")
	if err := os.Mkdir(other+".partial", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, env, "backup", "--to", other); err == nil || !strings.Contains(err.Error(), "left by a backup that was stopped") {
		t.Errorf("existing DIR.partial: %v", err)
	}
	_, _, err := runCLI(t, env, "backup")
	checkUsageError(t, err, "backup: --to is required")
	_, _, err = runCLI(t, env, "backup", "--to", filepath.Join(root, "x"), "extra")
	checkUsageError(t, err, `backup: unexpected argument "extra"`)
	if *n != 0 {
		t.Errorf("%d requests, want none", *n)
	}
	stdout, _, err := runCLI(t, nil, "help", "backup")
	if err != nil || !strings.HasPrefix(stdout, "usage: toc backup --to DIR") || !strings.Contains(stdout, "toc serve --data DIR") {
		t.Errorf("help backup: %v\n%s", err, stdout)
	}
}

// TestBackupInterrupted: a backup stopped mid-stream (SIGINT or SIGTERM
// cancel its context) removes its DIR.partial and leaves no DIR.
func TestBackupInterrupted(t *testing.T) {
	t.Parallel()
	part := backupStream(t, []tarEntry{{name: "000002.log", body: "wal"}, {name: "a.sst", body: strings.Repeat("s", 4096)}}, nil)
	part = part[:len(part)-1024] // without the end of the archive
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.Write(part)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	defer s.Close()
	root := t.TempDir()
	dir := filepath.Join(root, "copy")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			return map[string]string{EnvServer: s.URL, EnvToken: "admin-secret"}[k]
		}}
		done <- run(ctx, []string{"backup", "--to", dir}, e)
	}()
	testkit.WaitFor(t, 10*time.Second, "the backup to write a.sst into copy.partial", func() bool {
		_, err := os.Stat(filepath.Join(dir+".partial", "a.sst"))
		return err == nil
	})
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "copy.partial was removed") {
			t.Fatalf("an interrupted backup: %v, want an error saying copy.partial was removed", err)
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the backup did not stop within 10s of its context's end")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}
