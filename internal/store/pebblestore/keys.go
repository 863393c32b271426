package pebblestore

import (
	"encoding/binary"
	"fmt"

	"github.com/toc-dev/toc/task"
)

// The key layout. Every key starts with a byte that says what it is; ms are
// Unix milliseconds as 8 bytes big-endian with the sign bit flipped (so keys
// sort by time, times before 1970 included) and ids are their 16 bytes.
//
//	t <id>                            → record: version byte, then the task record (package record)
//	w <wake ms> <id>                  → state byte, kind byte, app (WakeAt not zero; the app
//	                                    for the engine's turns between apps, absent in entries
//	                                    written before it was added)
//	p <app> 0x00 <next attempt ms> <id> → empty                 (scheduled, pull target, not
//	                                    woken at its next attempt: see waitsUnwoken)
//	k <app> 0x00 <key>                → id                      (Key not empty; until swept)
//	a <app> 0x00 <state byte> <id>    → empty                   (every task: List)
//	f <finished ms> <id>              → empty                   (final, FinishedAt set: Sweep)
//
// A pull task woken at its next attempt (WakeAt is NextAttemptAt, to the
// millisecond: the usual case) has no p entry: its w entry, which carries
// its state, kind and app, finds it (Claimable merges both orders). Its
// create and its ack write two entries fewer that way. Those that wait
// unwoken (WakeAt zero or their deadline's: the engine's store path,
// ClaimableWaiting) keep theirs. Entries that an earlier layout wrote for
// woken tasks are deleted by Open (dropWokenPullEntries).
//
// An app never contains 0x00 (task.ValidateApp allows [a-z0-9._-]; the store
// checks), so the separator ends it unambiguously. Keys come last in their
// key and need no separator.
const (
	prefixTask     byte = 't'
	prefixWake     byte = 'w'
	prefixPull     byte = 'p'
	prefixKey      byte = 'k'
	prefixApp      byte = 'a'
	prefixFinished byte = 'f'
)

const (
	idLen = len(task.ID{})
	msLen = 8
)

// appendMs appends ms so that the bytes sort as the numbers do.
func appendMs(b []byte, ms int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(ms)^(1<<63))
}

// readMs reads what appendMs wrote.
func readMs(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// taskKey is the key of a task's record.
func taskKey(id task.ID) []byte {
	return append([]byte{prefixTask}, id[:]...)
}

// wakeKey is a task's entry in the wake-time order.
func wakeKey(ms int64, id task.ID) []byte {
	return appendWakeKey(make([]byte, 0, 1+msLen+idLen), ms, id)
}

// appendWakeKey appends wakeKey(ms, id) to b.
func appendWakeKey(b []byte, ms int64, id task.ID) []byte {
	b = append(b, prefixWake)
	b = appendMs(b, ms)
	return append(b, id[:]...)
}

// wakeBound sorts after the wake keys of every time before ms and before
// those of ms and later.
func wakeBound(ms int64) []byte {
	return appendMs([]byte{prefixWake}, ms)
}

// parseWakeKey reads a key made by wakeKey.
func parseWakeKey(k []byte) (ms int64, id task.ID, err error) {
	if len(k) != 1+msLen+idLen || k[0] != prefixWake {
		return 0, id, fmt.Errorf("pebblestore: malformed wake key %x", k)
	}
	copy(id[:], k[1+msLen:])
	return readMs(k[1:]), id, nil
}

// pullPrefix starts every claimable entry of app.
func pullPrefix(app string) []byte {
	return appendAppPrefix(make([]byte, 0, 1+len(app)+1+msLen+idLen), prefixPull, app)
}

// appendAppPrefix appends the start of an app's keys of a kind (prefix):
// the prefix, the app and a 0.
func appendAppPrefix(b []byte, prefix byte, app string) []byte {
	b = append(b, prefix)
	b = append(b, app...)
	return append(b, 0)
}

// pullKey is a claimable task's entry: app, then NextAttemptAt in ms.
func pullKey(app string, ms int64, id task.ID) []byte {
	return appendPullKey(make([]byte, 0, 1+len(app)+1+msLen+idLen), app, ms, id)
}

// appendPullKey appends pullKey(app, ms, id) to b.
func appendPullKey(b []byte, app string, ms int64, id task.ID) []byte {
	return append(appendMs(appendAppPrefix(b, prefixPull, app), ms), id[:]...)
}

// parsePullKey reads a key made by pullKey, given the length of its prefix
// (pullPrefix(app)).
func parsePullKey(k []byte, prefixLen int) (ms int64, id task.ID, err error) {
	if len(k) != prefixLen+msLen+idLen || k[0] != prefixPull {
		return 0, id, fmt.Errorf("pebblestore: malformed pull key %x", k)
	}
	copy(id[:], k[prefixLen+msLen:])
	return readMs(k[prefixLen:]), id, nil
}

// waitsUnwoken reports whether t has a p entry: a scheduled pull task
// whose wake time is not its next attempt (to the millisecond), so that no
// w entry finds it when it can be claimed.
func waitsUnwoken(t *task.Task) bool {
	return t.State == task.Scheduled && t.Target.Kind() == "pull" &&
		(t.WakeAt.IsZero() || t.WakeAt.UnixMilli() != t.NextAttemptAt.UnixMilli())
}

// keyKey maps an app's key to the id of the task that has it.
func keyKey(app, key string) []byte {
	return appendKeyKey(make([]byte, 0, 1+len(app)+1+len(key)), app, key)
}

// appendKeyKey appends keyKey(app, key) to b.
func appendKeyKey(b []byte, app, key string) []byte {
	return append(appendAppPrefix(b, prefixKey, app), key...)
}

// appStatePrefix starts the list of app's tasks in a state.
func appStatePrefix(app string, state byte) []byte {
	return append(appendAppPrefix(make([]byte, 0, 1+len(app)+2+idLen), prefixApp, app), state)
}

// appStateKey is a task's entry in the list of its app and state.
func appStateKey(app string, state byte, id task.ID) []byte {
	return append(appStatePrefix(app, state), id[:]...)
}

// appendAppStateKey appends appStateKey(app, state, id) to b.
func appendAppStateKey(b []byte, app string, state byte, id task.ID) []byte {
	return append(append(appendAppPrefix(b, prefixApp, app), state), id[:]...)
}

// parseAppStateKey returns the id that ends a key made by appStateKey.
func parseAppStateKey(k []byte, prefixLen int) (task.ID, error) {
	var id task.ID
	if len(k) != prefixLen+idLen || k[0] != prefixApp {
		return id, fmt.Errorf("pebblestore: malformed list key %x", k)
	}
	copy(id[:], k[prefixLen:])
	return id, nil
}

// finishedKey is a final task's entry in the finish-time order.
func finishedKey(ms int64, id task.ID) []byte {
	return appendFinishedKey(make([]byte, 0, 1+msLen+idLen), ms, id)
}

// appendFinishedKey appends finishedKey(ms, id) to b.
func appendFinishedKey(b []byte, ms int64, id task.ID) []byte {
	b = append(b, prefixFinished)
	b = appendMs(b, ms)
	return append(b, id[:]...)
}

// finishedBound sorts after the finished keys of every time before ms and
// before those of ms and later.
func finishedBound(ms int64) []byte {
	return appendMs([]byte{prefixFinished}, ms)
}

// parseFinishedKey reads a key made by finishedKey.
func parseFinishedKey(k []byte) (ms int64, id task.ID, err error) {
	if len(k) != 1+msLen+idLen || k[0] != prefixFinished {
		return 0, id, fmt.Errorf("pebblestore: malformed finished key %x", k)
	}
	copy(id[:], k[1+msLen:])
	return readMs(k[1:]), id, nil
}

// prefixEnd returns the smallest key greater than every key that starts with
// prefix, or nil (no bound) when there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// successor returns the smallest key greater than k.
func successor(k []byte) []byte {
	return append(append(make([]byte, 0, len(k)+1), k...), 0)
}

// State and kind bytes. They are on disk: never renumber them.
var stateBytes = map[task.State]byte{
	task.Scheduled:  1,
	task.Delivering: 2,
	task.Delivered:  3,
	task.Dead:       4,
	task.Expired:    5,
	task.Cancelled:  6,
}

var byteStates = func() (m [256]task.State) {
	for s, b := range stateBytes {
		m[b] = s
	}
	return m
}()

func stateByte(s task.State) (byte, error) {
	b, ok := stateBytes[s]
	if !ok {
		return 0, fmt.Errorf("pebblestore: unknown task state %q", s)
	}
	return b, nil
}

func parseStateByte(b byte) (task.State, error) {
	if s := byteStates[b]; s != "" {
		return s, nil
	}
	return "", fmt.Errorf("pebblestore: unknown state byte %d", b)
}

// kindBytes are the target kinds (task.Target.Kind) as stored in wake
// entries. A kind added to task.Target needs a byte here: until then tasks
// of that kind are refused rather than indexed with the wrong kind.
var kindBytes = map[string]byte{
	"":     0,
	"http": 'h',
	"pull": 'p',
	"amqp": 'a',
	"nats": 'n',
}

var byteKinds = func() (m [256]*string) {
	for k, b := range kindBytes {
		m[b] = &k
	}
	return m
}()

func kindByte(kind string) (byte, error) {
	b, ok := kindBytes[kind]
	if !ok {
		return 0, fmt.Errorf("pebblestore: unknown target kind %q", kind)
	}
	return b, nil
}

func parseKindByte(b byte) (string, error) {
	if k := byteKinds[b]; k != nil {
		return *k, nil
	}
	return "", fmt.Errorf("pebblestore: unknown kind byte %d", b)
}

// Schedules ([store.Schedules], schedules.go) have key families of their
// own, each named by the upper case of the task family it mirrors; the task
// families above are untouched by them:
//
//	S <id>                  → schedule record (record.EncodeSchedule)
//	W <wake ms> <id>        → empty           (WakeAt not zero: DueSchedules)
//	K <app> 0x00 <key>      → id              (every schedule: its key)
//	A <app> 0x00 <id>       → state byte      (every schedule: ListSchedules, CountSchedules)
const (
	prefixSchedule     byte = 'S'
	prefixScheduleWake byte = 'W'
	prefixScheduleKey  byte = 'K'
	prefixScheduleApp  byte = 'A'
)

// schedRecordKey is the key of a schedule's record.
func schedRecordKey(id task.ID) []byte {
	return append([]byte{prefixSchedule}, id[:]...)
}

// schedWakeKey is a schedule's entry in the due order.
func schedWakeKey(ms int64, id task.ID) []byte {
	b := make([]byte, 0, 1+msLen+idLen)
	b = append(b, prefixScheduleWake)
	b = appendMs(b, ms)
	return append(b, id[:]...)
}

// schedWakeBound sorts after the due entries of every time before ms and
// before those of ms and later.
func schedWakeBound(ms int64) []byte {
	return appendMs([]byte{prefixScheduleWake}, ms)
}

// parseSchedWakeKey reads a key made by schedWakeKey.
func parseSchedWakeKey(k []byte) (ms int64, id task.ID, err error) {
	if len(k) != 1+msLen+idLen || k[0] != prefixScheduleWake {
		return 0, id, fmt.Errorf("pebblestore: malformed schedule wake key %x", k)
	}
	copy(id[:], k[1+msLen:])
	return readMs(k[1:]), id, nil
}

// schedKeyKey maps an app's schedule key to the id of the schedule that has
// it.
func schedKeyKey(app, key string) []byte {
	b := make([]byte, 0, 1+len(app)+1+len(key))
	b = append(b, prefixScheduleKey)
	b = append(b, app...)
	b = append(b, 0)
	return append(b, key...)
}

// schedListPrefix starts the list of app's schedules.
func schedListPrefix(app string) []byte {
	b := make([]byte, 0, 1+len(app)+1+idLen)
	b = append(b, prefixScheduleApp)
	b = append(b, app...)
	return append(b, 0)
}

// schedListKey is a schedule's entry in the list of its app.
func schedListKey(app string, id task.ID) []byte {
	return append(schedListPrefix(app), id[:]...)
}

// parseSchedListKey returns the id that ends a key made by schedListKey,
// given the length of its prefix (schedListPrefix(app)).
func parseSchedListKey(k []byte, prefixLen int) (task.ID, error) {
	var id task.ID
	if len(k) != prefixLen+idLen || k[0] != prefixScheduleApp {
		return id, fmt.Errorf("pebblestore: malformed schedule list key %x", k)
	}
	copy(id[:], k[prefixLen:])
	return id, nil
}

// Schedule state bytes, the values of the list entries. They are on disk:
// never renumber them.
var scheduleStateBytes = map[task.ScheduleState]byte{
	task.ScheduleActive: 1,
	task.SchedulePaused: 2,
	task.ScheduleEnded:  3,
}

func scheduleStateByte(s task.ScheduleState) (byte, error) {
	b, ok := scheduleStateBytes[s]
	if !ok {
		return 0, fmt.Errorf("pebblestore: unknown schedule state %q", s)
	}
	return b, nil
}

func parseScheduleStateByte(b byte) (task.ScheduleState, error) {
	for s, v := range scheduleStateBytes {
		if v == b {
			return s, nil
		}
	}
	return "", fmt.Errorf("pebblestore: unknown schedule state byte %d", b)
}
