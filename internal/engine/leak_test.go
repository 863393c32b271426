package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: every
// goroutine has an owner that waits for it (STYLE.md 8).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
