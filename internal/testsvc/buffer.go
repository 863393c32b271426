package testsvc

import (
	"strings"
	"sync"
)

// LockedBuffer collects what several goroutines write (a logger's output, a
// child process's stderr) for a test to read while they go on. Its zero
// value is ready to use.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
