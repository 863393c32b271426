package sink

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: every
// goroutine has an owner that waits for it (STYLE.md 8). The sinks'
// packages (httpsink, amqpsink, natssink) check the same in their own
// TestMain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
