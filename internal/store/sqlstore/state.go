package sqlstore

import (
	"fmt"

	"github.com/toc-dev/toc/task"
)

// State codes, as stored in the state column. They are on disk and in the
// .sql files (state = 1 is scheduled): never renumber them. They are
// pebblestore's state bytes.
var stateCodes = map[task.State]int16{
	task.Scheduled:  1,
	task.Delivering: 2,
	task.Delivered:  3,
	task.Dead:       4,
	task.Expired:    5,
	task.Cancelled:  6,
}

var codeStates = func() map[int16]task.State {
	m := make(map[int16]task.State, len(stateCodes))
	for s, c := range stateCodes {
		m[c] = s
	}
	return m
}()

func stateCode(s task.State) (int16, error) {
	c, ok := stateCodes[s]
	if !ok {
		return 0, fmt.Errorf("sqlstore: unknown task state %q", s)
	}
	return c, nil
}

func parseStateCode(c int64) (task.State, error) {
	if s, ok := codeStates[int16(c)]; ok && int64(int16(c)) == c {
		return s, nil
	}
	return "", fmt.Errorf("sqlstore: unknown state code %d", c)
}

// kinds are the target kinds (task.Target.Kind) the store accepts. A kind
// added to task.Target must be added here, after checking that the kind
// columns (16 bytes on MySQL) can hold it.
var kinds = map[string]bool{"": true, "http": true, "pull": true, "amqp": true, "nats": true}
