//go:build linux

package testsvc

import (
	"errors"
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
// path, in one fallocate of the free space read just before: space freed
// after that (a reserve) stays free. When others took some meanwhile, it
// reads the free space again and tries again. It returns the size taken.
func FillDisk(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for tries := 0; ; tries++ {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
			t.Fatal(err)
		}
		n := int64(st.Bavail) * int64(st.Bsize)
		if n == 0 {
			return 0
		}
		err := syscall.Fallocate(int(f.Fd()), 0, 0, n)
		if err == nil {
			return n
		}
		if !errors.Is(err, syscall.ENOSPC) || tries == 100 {
			t.Fatalf("fill %s with %d bytes: %v", filepath.Dir(path), n, err)
		}
	}
}
