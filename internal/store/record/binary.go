package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/toc-dev/toc/task"
)

// Version 2 records: the byte 2, then the task as a struct.
//
// Written by hand rather than with encoding/json (version 1) or a generated
// codec: encoding and decoding JSON records was about 13% of the fire
// path's CPU and most of the durable schedule path's, and a generator would
// add a tool and a dependency to the build for one struct. This codec is
// 10-15x faster with one allocation per encode; record_test.go fills every
// field of task.Task by reflection, so a field added to Task without a bit
// here fails the tests.
//
// Every struct (the task, its target, each kind of target, its retry policy
// and each history event) is written the same way: a uvarint mask of the
// fields that are present, then those fields in the order of their bits,
// lowest first. A field is present when it is not its zero value; a pointer
// is present when it is not nil, and then its value follows even if zero, so
// a pointer to a zero time or to an empty PullTarget survives. An absent
// field decodes to its zero value. Empty payloads, header maps and histories
// are absent, so they decode as nil, as version 1 did.
//
//	task          bit 0 payload (first, so that everything after it can be
//	              turned into one string whose substrings are the task's
//	              strings), 1 id, 2 app, 3 key, 4 due_at, 5 next_attempt_at,
//	              6 *deadline, 7 target, 8 retry, 9 state (symbol),
//	              10 attempts, 11 last_error, 12 lease, 13 *lease_expires_at,
//	              14 created_at, 15 updated_at, 16 *finished_at, 17 history,
//	              18 wake_at, 19 schedule_id (added with schedules: a
//	              record written before it has no bit 19 and decodes with
//	              a zero ScheduleID), 20 trace.parent, 21 trace.state
//	              (added with tracing: W3C trace context, absent when
//	              empty, so earlier records decode without them; a
//	              nil Trace is neither)
//	target        bit 0 *http, 1 *pull, 2 *amqp, 3 *nats
//	http          bit 0 url, 1 headers, 2 timeout
//	pull          no fields: its mask is 0
//	amqp          bit 0 url, 1 exchange, 2 routing_key
//	nats          bit 0 url, 1 subject
//	retry         bit 0 max_attempts, 1 min_backoff, 2 max_backoff
//	event         bit 0 at, 1 what (symbol), 2 attempt, 3 error
//
// The fields are encoded as:
//
//	string, []byte  uvarint length, then the bytes (strings are not checked
//	                for UTF-8: they come back byte for byte)
//	int, Duration   varint (zigzag)
//	ID              its 16 bytes
//	time.Time       uvarint h = zigzag(ms)<<1 | f, ms being Unix milliseconds
//	                rounded down; if f is 1 a uvarint of the nanoseconds
//	                within the millisecond (1 to 999999) follows. Times come
//	                back in UTC, without a monotonic reading. Seconds are
//	                within ±maxUnixSec (about 31.7 million years)
//	                of 1970.
//	symbol          uvarint h: if h&1 is 1, the string is symbols[h>>1];
//	                otherwise a string of h>>1 bytes follows
//	headers         uvarint count, then each key and value as strings, keys
//	                in increasing order so that equal tasks encode equally
//	history         uvarint count, then each event as a struct
//
// To add a field: give it the next bit of its struct, write it only when it
// is not zero, read it, and teach maxSize its size. Records without it are
// still read by earlier releases. Those with it are refused by them, as a
// mask bit a reader does not know is an error rather than something to skip:
// an earlier release that rewrote the task would drop the field silently.

// The bits of the task's fields.
const (
	fPayload = iota
	fID
	fApp
	fKey
	fDueAt
	fNextAttemptAt
	fDeadline
	fTarget
	fRetry
	fState
	fAttempts
	fLastError
	fLease
	fLeaseExpiresAt
	fCreatedAt
	fUpdatedAt
	fFinishedAt
	fHistory
	fWakeAt
	fScheduleID
	fTraceParent
	fTraceState
	numTaskFields
)

// The bits of the target's fields.
const (
	fHTTP = iota
	fPull
	fAMQP
	fNATS
	numTargetFields
)

// The bits of HTTPTarget's, AMQPTarget's and NATSTarget's fields.
const (
	fHTTPURL = iota
	fHTTPHeaders
	fHTTPTimeout
	numHTTPFields
)

const (
	fAMQPURL = iota
	fAMQPExchange
	fAMQPRoutingKey
	numAMQPFields
)

const (
	fNATSURL = iota
	fNATSSubject
	numNATSFields
)

// The bits of RetryPolicy's fields.
const (
	fMaxAttempts = iota
	fMinBackoff
	fMaxBackoff
	numRetryFields
)

// The bits of Event's fields.
const (
	fEventAt = iota
	fEventWhat
	fEventAttempt
	fEventError
	numEventFields
)

// symbols are the states and event names that a record writes as a number,
// its index here. The table is part of the format: append to it, never
// change or reorder it. symbolIndex must agree with it.
var symbols = [...]string{
	"scheduled", "delivering", "delivered", "dead", "expired", "cancelled",
	"created", "attempt", "failed", "retried", "rescheduled", "released",
	"changed", "interrupted",
}

// symbolIndex returns s's index in symbols, or -1.
func symbolIndex(s string) int {
	switch s {
	case "scheduled":
		return 0
	case "delivering":
		return 1
	case "delivered":
		return 2
	case "dead":
		return 3
	case "expired":
		return 4
	case "cancelled":
		return 5
	case "created":
		return 6
	case "attempt":
		return 7
	case "failed":
		return 8
	case "retried":
		return 9
	case "rescheduled":
		return 10
	case "released":
		return 11
	case "changed":
		return 12
	case "interrupted":
		return 13
	}
	return -1
}

// maxUnixSec bounds the times a record holds, in seconds either side of
// 1970: about 31.7 million years, far wider than the years 0 to 9999 that
// version 1 could hold, and narrow enough that milliseconds fit the encoding.
const maxUnixSec = 1e15

func timeInRange(t time.Time) bool {
	s := t.Unix()
	return -maxUnixSec <= s && s <= maxUnixSec
}

// checkTimes returns an error naming the first of t's times that a record
// cannot hold.
func checkTimes(t *task.Task) error {
	bad := func(p *time.Time) bool { return p != nil && !timeInRange(*p) }
	var field string
	var at time.Time
	switch {
	case bad(&t.DueAt):
		field, at = "due_at", t.DueAt
	case bad(&t.NextAttemptAt):
		field, at = "next_attempt_at", t.NextAttemptAt
	case bad(t.Deadline):
		field, at = "deadline", *t.Deadline
	case bad(t.LeaseExpiresAt):
		field, at = "lease_expires_at", *t.LeaseExpiresAt
	case bad(&t.CreatedAt):
		field, at = "created_at", t.CreatedAt
	case bad(&t.UpdatedAt):
		field, at = "updated_at", t.UpdatedAt
	case bad(t.FinishedAt):
		field, at = "finished_at", *t.FinishedAt
	case bad(&t.WakeAt):
		field, at = "wake_at", t.WakeAt
	default:
		for i := range t.History {
			if bad(&t.History[i].At) {
				field, at = fmt.Sprintf("history[%d].at", i), t.History[i].At
				break
			}
		}
	}
	if field == "" {
		return nil
	}
	return fmt.Errorf("%s %v is out of range", field, at)
}

// bit returns the mask with bit i set if set is true.
func bit(set bool, i int) uint64 {
	if set {
		return 1 << i
	}
	return 0
}

func has(mask uint64, i int) bool { return mask&(1<<i) != 0 }

// appendBinary appends t's version 2 record to b. t's times must have passed
// checkTimes.
func appendBinary(b []byte, t *task.Task) []byte {
	m := bit(len(t.Payload) > 0, fPayload) |
		bit(!t.ID.IsZero(), fID) |
		bit(t.App != "", fApp) |
		bit(t.Key != "", fKey) |
		bit(!t.DueAt.IsZero(), fDueAt) |
		bit(!t.NextAttemptAt.IsZero(), fNextAttemptAt) |
		bit(t.Deadline != nil, fDeadline) |
		bit(t.Target != task.Target{}, fTarget) |
		bit(t.Retry != task.RetryPolicy{}, fRetry) |
		bit(t.State != "", fState) |
		bit(t.Attempts != 0, fAttempts) |
		bit(t.LastError != "", fLastError) |
		bit(t.Lease != "", fLease) |
		bit(t.LeaseExpiresAt != nil, fLeaseExpiresAt) |
		bit(!t.CreatedAt.IsZero(), fCreatedAt) |
		bit(!t.UpdatedAt.IsZero(), fUpdatedAt) |
		bit(t.FinishedAt != nil, fFinishedAt) |
		bit(len(t.History) > 0, fHistory) |
		bit(!t.WakeAt.IsZero(), fWakeAt) |
		bit(!t.ScheduleID.IsZero(), fScheduleID) |
		bit(t.Trace != nil && t.Trace.Parent != "", fTraceParent) |
		bit(t.Trace != nil && t.Trace.State != "", fTraceState)

	b = append(b, Version)
	b = binary.AppendUvarint(b, m)
	if has(m, fPayload) {
		b = appendString(b, t.Payload)
	}
	if has(m, fID) {
		b = append(b, t.ID[:]...)
	}
	if has(m, fApp) {
		b = appendString(b, t.App)
	}
	if has(m, fKey) {
		b = appendString(b, t.Key)
	}
	if has(m, fDueAt) {
		b = appendTime(b, t.DueAt)
	}
	if has(m, fNextAttemptAt) {
		b = appendTime(b, t.NextAttemptAt)
	}
	if has(m, fDeadline) {
		b = appendTime(b, *t.Deadline)
	}
	if has(m, fTarget) {
		b = appendTarget(b, &t.Target)
	}
	if has(m, fRetry) {
		b = appendRetry(b, &t.Retry)
	}
	if has(m, fState) {
		b = appendSymbol(b, string(t.State))
	}
	if has(m, fAttempts) {
		b = binary.AppendVarint(b, int64(t.Attempts))
	}
	if has(m, fLastError) {
		b = appendString(b, t.LastError)
	}
	if has(m, fLease) {
		b = appendString(b, t.Lease)
	}
	if has(m, fLeaseExpiresAt) {
		b = appendTime(b, *t.LeaseExpiresAt)
	}
	if has(m, fCreatedAt) {
		b = appendTime(b, t.CreatedAt)
	}
	if has(m, fUpdatedAt) {
		b = appendTime(b, t.UpdatedAt)
	}
	if has(m, fFinishedAt) {
		b = appendTime(b, *t.FinishedAt)
	}
	if has(m, fHistory) {
		b = binary.AppendUvarint(b, uint64(len(t.History)))
		for i := range t.History {
			b = appendEvent(b, &t.History[i])
		}
	}
	if has(m, fWakeAt) {
		b = appendTime(b, t.WakeAt)
	}
	if has(m, fScheduleID) {
		b = append(b, t.ScheduleID[:]...)
	}
	if has(m, fTraceParent) {
		b = appendString(b, t.Trace.Parent)
	}
	if has(m, fTraceState) {
		b = appendString(b, t.Trace.State)
	}
	return b
}

func appendTarget(b []byte, t *task.Target) []byte {
	m := bit(t.HTTP != nil, fHTTP) |
		bit(t.Pull != nil, fPull) |
		bit(t.AMQP != nil, fAMQP) |
		bit(t.NATS != nil, fNATS)
	b = binary.AppendUvarint(b, m)
	if h := t.HTTP; h != nil {
		m := bit(h.URL != "", fHTTPURL) |
			bit(len(h.Headers) > 0, fHTTPHeaders) |
			bit(h.Timeout != 0, fHTTPTimeout)
		b = binary.AppendUvarint(b, m)
		if has(m, fHTTPURL) {
			b = appendString(b, h.URL)
		}
		if has(m, fHTTPHeaders) {
			b = appendHeaders(b, h.Headers)
		}
		if has(m, fHTTPTimeout) {
			b = binary.AppendVarint(b, int64(h.Timeout))
		}
	}
	if t.Pull != nil {
		b = append(b, 0) // PullTarget has no fields
	}
	if a := t.AMQP; a != nil {
		m := bit(a.URL != "", fAMQPURL) |
			bit(a.Exchange != "", fAMQPExchange) |
			bit(a.RoutingKey != "", fAMQPRoutingKey)
		b = binary.AppendUvarint(b, m)
		if has(m, fAMQPURL) {
			b = appendString(b, a.URL)
		}
		if has(m, fAMQPExchange) {
			b = appendString(b, a.Exchange)
		}
		if has(m, fAMQPRoutingKey) {
			b = appendString(b, a.RoutingKey)
		}
	}
	if n := t.NATS; n != nil {
		m := bit(n.URL != "", fNATSURL) |
			bit(n.Subject != "", fNATSSubject)
		b = binary.AppendUvarint(b, m)
		if has(m, fNATSURL) {
			b = appendString(b, n.URL)
		}
		if has(m, fNATSSubject) {
			b = appendString(b, n.Subject)
		}
	}
	return b
}

func appendRetry(b []byte, r *task.RetryPolicy) []byte {
	m := bit(r.MaxAttempts != 0, fMaxAttempts) |
		bit(r.MinBackoff != 0, fMinBackoff) |
		bit(r.MaxBackoff != 0, fMaxBackoff)
	b = binary.AppendUvarint(b, m)
	if has(m, fMaxAttempts) {
		b = binary.AppendVarint(b, int64(r.MaxAttempts))
	}
	if has(m, fMinBackoff) {
		b = binary.AppendVarint(b, int64(r.MinBackoff))
	}
	if has(m, fMaxBackoff) {
		b = binary.AppendVarint(b, int64(r.MaxBackoff))
	}
	return b
}

func appendEvent(b []byte, e *task.Event) []byte {
	m := bit(!e.At.IsZero(), fEventAt) |
		bit(e.What != "", fEventWhat) |
		bit(e.Attempt != 0, fEventAttempt) |
		bit(e.Error != "", fEventError)
	b = binary.AppendUvarint(b, m)
	if has(m, fEventAt) {
		b = appendTime(b, e.At)
	}
	if has(m, fEventWhat) {
		b = appendSymbol(b, e.What)
	}
	if has(m, fEventAttempt) {
		b = binary.AppendVarint(b, int64(e.Attempt))
	}
	if has(m, fEventError) {
		b = appendString(b, e.Error)
	}
	return b
}

// appendHeaders writes h's entries in the order of their keys.
func appendHeaders(b []byte, h map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	var buf [16]string // enough for most tasks, on the stack
	keys := buf[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, h[k])
	}
	return b
}

func appendString[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendSymbol(b []byte, s string) []byte {
	if i := symbolIndex(s); i >= 0 {
		return binary.AppendUvarint(b, uint64(i)<<1|1)
	}
	b = binary.AppendUvarint(b, uint64(len(s))<<1)
	return append(b, s...)
}

// appendTime writes t, which must be in range.
func appendTime(b []byte, t time.Time) []byte {
	ns := int64(t.Nanosecond())
	ms := t.Unix()*1e3 + ns/1e6
	sub := ns % 1e6
	h := zigzag(ms) << 1
	if sub == 0 {
		return binary.AppendUvarint(b, h)
	}
	b = binary.AppendUvarint(b, h|1)
	return binary.AppendUvarint(b, uint64(sub))
}

func zigzag(x int64) uint64 { return uint64(x<<1) ^ uint64(x>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// Worst-case sizes, for maxSize.
const (
	maxVarint = binary.MaxVarintLen64
	maxTime   = maxVarint + 3 // h, then nanoseconds below 1e6
)

// maxSize bounds the length of t's record, so that Encode allocates once.
// It counts strings exactly and numbers at their largest.
func maxSize(t *task.Task) int {
	n := 1 + maxVarint + // version, mask
		stringSize(len(t.Payload)) + len(t.ID) + stringSize(len(t.App)) + stringSize(len(t.Key)) +
		len(t.ScheduleID) +
		8*maxTime + // due_at … wake_at
		4*maxVarint + // masks of target, pull, amqp, nats
		4*maxVarint + // retry
		maxVarint + stringSize(len(t.State)) + // state: a symbol, or a string
		maxVarint + // attempts
		stringSize(len(t.LastError)) + stringSize(len(t.Lease)) +
		maxVarint // history count
	if tc := t.Trace; tc != nil {
		n += stringSize(len(tc.Parent)) + stringSize(len(tc.State))
	}
	if h := t.Target.HTTP; h != nil {
		n += 3*maxVarint + stringSize(len(h.URL)) // mask, header count, timeout
		for k, v := range h.Headers {
			n += stringSize(len(k)) + stringSize(len(v))
		}
	}
	if a := t.Target.AMQP; a != nil {
		n += stringSize(len(a.URL)) + stringSize(len(a.Exchange)) + stringSize(len(a.RoutingKey))
	}
	if s := t.Target.NATS; s != nil {
		n += stringSize(len(s.URL)) + stringSize(len(s.Subject))
	}
	for i := range t.History {
		e := &t.History[i]
		n += 3*maxVarint + maxTime + // mask, what, attempt, at
			stringSize(len(e.What)) + stringSize(len(e.Error))
	}
	return n
}

// stringSize is the size of a string or []byte of n bytes.
func stringSize(n int) int { return (bits.Len64(uint64(n)|1)+6)/7 + n }

// decoded holds a decoded task together with what its pointers most often
// point to, so that decodeBinary allocates them at once. The task keeps the
// whole value alive, which is no larger than a task with its own pointers.
type decoded struct {
	task  task.Task
	times [3]time.Time // deadline, lease_expires_at, finished_at
	http  task.HTTPTarget
}

// errTruncated and friends are what a malformed record's error wraps, after
// the name of the field that could not be read.
var (
	errTruncated  = errors.New("truncated")
	errOutOfRange = errors.New("out of range")
	errUnknown    = errors.New("fields unknown to this release")
)

// decoder reads a version 2 record. Its first error sticks: reads after it
// return zero values, and decodeBinary returns it.
type decoder struct {
	b   []byte
	s   string // b as a string once the payload is read; strings are sliced from it
	off int
	err error
}

func (d *decoder) fail(field string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("toc: decode task record: %s: %w", field, err)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field, errTruncated)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) int(field string) int {
	v := unzigzag(d.uvarint(field))
	if int64(int(v)) != v {
		d.fail(field, errOutOfRange)
		return 0
	}
	return int(v)
}

func (d *decoder) duration(field string) task.Duration {
	return task.Duration(unzigzag(d.uvarint(field)))
}

// mask reads a struct's mask, which must have no bit at or past n.
func (d *decoder) mask(field string, n int) uint64 {
	m := d.uvarint(field)
	if m>>n != 0 {
		d.fail(field, fmt.Errorf("%w (mask %#x)", errUnknown, m))
		return 0
	}
	return m
}

// length reads a length, or a count of items of at least size bytes each,
// and checks that they fit in what is left.
func (d *decoder) length(field string, size int) int {
	n := d.uvarint(field)
	if n > uint64((len(d.b)-d.off)/size) {
		d.fail(field, errTruncated)
		return 0
	}
	return int(n)
}

// bytes returns a copy of the next []byte, or nil if it is empty.
func (d *decoder) bytes(field string) []byte {
	n := d.length(field, 1)
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	d.off += copy(p, d.b[d.off:])
	return p
}

// id reads an id's 16 bytes into id.
func (d *decoder) id(field string, id *task.ID) {
	if len(d.b)-d.off < len(id) {
		d.fail(field, errTruncated)
		return
	}
	d.off += copy(id[:], d.b[d.off:])
}

func (d *decoder) string(field string) string {
	n := d.length(field, 1)
	s := d.s[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) symbol(field string) string {
	h := d.uvarint(field)
	if h&1 == 1 {
		if i := h >> 1; i < uint64(len(symbols)) {
			return symbols[i]
		}
		d.fail(field, errOutOfRange)
		return ""
	}
	if h>>1 > uint64(len(d.b)-d.off) {
		d.fail(field, errTruncated)
		return ""
	}
	n := int(h >> 1)
	s := d.s[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) time(field string) time.Time {
	h := d.uvarint(field)
	ms := unzigzag(h >> 1)
	var sub int64
	if h&1 == 1 {
		v := d.uvarint(field)
		if v >= 1e6 {
			d.fail(field, errOutOfRange)
			return time.Time{}
		}
		sub = int64(v)
	}
	if ms < -maxUnixSec*1e3 || ms > maxUnixSec*1e3+999 {
		d.fail(field, errOutOfRange)
		return time.Time{}
	}
	return time.Unix(ms/1e3, ms%1e3*1e6+sub).UTC()
}

// decodeBinary reads a version 2 record.
func decodeBinary(b []byte) (*task.Task, error) {
	d := decoder{b: b, off: 1}
	m := d.mask("task", numTaskFields)
	r := new(decoded)
	t := &r.task
	if has(m, fPayload) {
		t.Payload = d.bytes("payload")
	}
	// One string for the rest, all the task's strings slice it.
	d.b, d.off = d.b[d.off:], 0
	d.s = string(d.b)
	if has(m, fID) {
		d.id("id", &t.ID)
	}
	if has(m, fApp) {
		t.App = d.string("app")
	}
	if has(m, fKey) {
		t.Key = d.string("key")
	}
	if has(m, fDueAt) {
		t.DueAt = d.time("due_at")
	}
	if has(m, fNextAttemptAt) {
		t.NextAttemptAt = d.time("next_attempt_at")
	}
	if has(m, fDeadline) {
		r.times[0] = d.time("deadline")
		t.Deadline = &r.times[0]
	}
	if has(m, fTarget) {
		d.target(&t.Target, &r.http)
	}
	if has(m, fRetry) {
		d.retry(&t.Retry)
	}
	if has(m, fState) {
		t.State = task.State(d.symbol("state"))
	}
	if has(m, fAttempts) {
		t.Attempts = d.int("attempts")
	}
	if has(m, fLastError) {
		t.LastError = d.string("last_error")
	}
	if has(m, fLease) {
		t.Lease = d.string("lease")
	}
	if has(m, fLeaseExpiresAt) {
		r.times[1] = d.time("lease_expires_at")
		t.LeaseExpiresAt = &r.times[1]
	}
	if has(m, fCreatedAt) {
		t.CreatedAt = d.time("created_at")
	}
	if has(m, fUpdatedAt) {
		t.UpdatedAt = d.time("updated_at")
	}
	if has(m, fFinishedAt) {
		r.times[2] = d.time("finished_at")
		t.FinishedAt = &r.times[2]
	}
	if has(m, fHistory) {
		if n := d.length("history", 1); n > 0 {
			t.History = make([]task.Event, n)
			for i := range t.History {
				if d.err != nil {
					break
				}
				d.event(&t.History[i])
			}
		}
	}
	if has(m, fWakeAt) {
		t.WakeAt = d.time("wake_at")
	}
	if has(m, fScheduleID) {
		d.id("schedule_id", &t.ScheduleID)
	}
	if has(m, fTraceParent) || has(m, fTraceState) {
		t.Trace = new(task.TraceContext)
		if has(m, fTraceParent) {
			t.Trace.Parent = d.string("traceparent")
		}
		if has(m, fTraceState) {
			t.Trace.State = d.string("tracestate")
		}
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("task", fmt.Errorf("%d bytes after the last field", len(d.b)-d.off))
	}
	if d.err != nil {
		return nil, d.err
	}
	return t, nil
}

// target reads a target; its HTTP target, if any, goes in http.
func (d *decoder) target(t *task.Target, http *task.HTTPTarget) {
	m := d.mask("target", numTargetFields)
	if has(m, fHTTP) {
		h := http
		m := d.mask("target.http", numHTTPFields)
		if has(m, fHTTPURL) {
			h.URL = d.string("target.http.url")
		}
		if has(m, fHTTPHeaders) {
			h.Headers = d.headers("target.http.headers")
		}
		if has(m, fHTTPTimeout) {
			h.Timeout = d.duration("target.http.timeout")
		}
		t.HTTP = h
	}
	if has(m, fPull) {
		d.mask("target.pull", 0)
		t.Pull = new(task.PullTarget)
	}
	if has(m, fAMQP) {
		a := new(task.AMQPTarget)
		m := d.mask("target.amqp", numAMQPFields)
		if has(m, fAMQPURL) {
			a.URL = d.string("target.amqp.url")
		}
		if has(m, fAMQPExchange) {
			a.Exchange = d.string("target.amqp.exchange")
		}
		if has(m, fAMQPRoutingKey) {
			a.RoutingKey = d.string("target.amqp.routing_key")
		}
		t.AMQP = a
	}
	if has(m, fNATS) {
		n := new(task.NATSTarget)
		m := d.mask("target.nats", numNATSFields)
		if has(m, fNATSURL) {
			n.URL = d.string("target.nats.url")
		}
		if has(m, fNATSSubject) {
			n.Subject = d.string("target.nats.subject")
		}
		t.NATS = n
	}
}

// headers reads a header map, nil if it has no entries. Of two entries with
// the same key, the last wins.
func (d *decoder) headers(field string) map[string]string {
	n := d.length(field, 2) // an entry is at least two empty strings
	if n == 0 {
		return nil
	}
	h := make(map[string]string, n)
	for range n {
		k := d.string(field)
		v := d.string(field)
		if d.err != nil {
			return nil
		}
		h[k] = v
	}
	return h
}

func (d *decoder) retry(r *task.RetryPolicy) {
	m := d.mask("retry", numRetryFields)
	if has(m, fMaxAttempts) {
		r.MaxAttempts = d.int("retry.max_attempts")
	}
	if has(m, fMinBackoff) {
		r.MinBackoff = d.duration("retry.min_backoff")
	}
	if has(m, fMaxBackoff) {
		r.MaxBackoff = d.duration("retry.max_backoff")
	}
}

func (d *decoder) event(e *task.Event) {
	m := d.mask("history", numEventFields)
	if has(m, fEventAt) {
		e.At = d.time("history.at")
	}
	if has(m, fEventWhat) {
		e.What = d.symbol("history.what")
	}
	if has(m, fEventAttempt) {
		e.Attempt = d.int("history.attempt")
	}
	if has(m, fEventError) {
		e.Error = d.string("history.error")
	}
}
