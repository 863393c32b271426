//go:build linux

package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends: a small file system a test can fill. It skips the
// test (fails it under CI=true, which runs as root) when mounting is not
// permitted: not root, or a container without CAP_SYS_ADMIN.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		unavailable(t, fmt.Sprintf("mount a tmpfs (needs root with CAP_SYS_ADMIN): %v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// FillDisk takes every block its file system has free, as the file at
// path, in one fallocate: the free space is read first, so space freed
// meanwhile (a reserve) stays free. It returns the size taken.
func FillDisk(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail) * int64(st.Bsize)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		t.Fatalf("fill %s with %d bytes: %v", filepath.Dir(path), n, err)
	}
	return n
}
