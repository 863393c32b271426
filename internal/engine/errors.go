package engine

import (
	"errors"
	"fmt"

	"github.com/toc-dev/toc/task"
)

// Errors the engine returns besides store.ErrNotFound and *task.FieldError.
var (
	// ErrNotReady: the engine is not started, or is stopping.
	ErrNotReady = errors.New("toc: not ready")
	// ErrTooLarge: a payload is over the configured limit.
	ErrTooLarge = errors.New("toc: payload too large")
	// errSkip aborts a Store.Update without writing.
	errSkip = errors.New("skip")
)

// ConflictError says a task is not in a state that allows the operation.
// The API answers it with 409 and the task.
type ConflictError struct {
	Op   string
	Task *task.Task
	Why  string
}

func (e *ConflictError) Error() string {
	return conflictText(e.Op, "task", e.Task.ID, string(e.Task.State), e.Why)
}

// conflictText is the message of a *ConflictError or a
// *ScheduleConflictError: op refused on the kind ("task", "schedule") with
// id, because of why or, when why is "", its state.
func conflictText(op, kind string, id task.ID, state, why string) string {
	if why == "" {
		why = "it is " + state
	}
	return fmt.Sprintf("toc: cannot %s %s %s: %s", op, kind, id, why)
}

func conflict(op string, t *task.Task, why string) error {
	return &ConflictError{Op: op, Task: t.Clone(), Why: why}
}
