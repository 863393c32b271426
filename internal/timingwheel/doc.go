// Package timingwheel implements a hierarchical timing wheel: a set of keys,
// each due at a millisecond, that reports the earliest due time in constant
// time and expires keys in time order as its owner advances it.
//
// It is a pure data structure in the manner of NATS's server/thw: time is an
// int64 (Unix milliseconds) passed in by the caller, and there are no locks,
// goroutines or clock reads. The engine owns one [Wheel], guards it with its
// own mutex, arms a single timer at [Wheel.Next] and calls [Wheel.Advance]
// when that timer fires.
//
// # Levels and buckets
//
// The wheel has 8 levels of 64 slots (the design of Linux's timer wheel and
// of Kafka's and Netty's hierarchical wheels). A slot of level L spans 64^L
// ms, so level 0 has 1 ms slots and level 7 covers a window of 2^48 ms,
// about 8919 years. Slots address absolute time: a key due at `at` is kept
// in the lowest level L whose aligned 64^(L+1) ms window holds both `at`
// and the wheel's now, in slot (at >> 6L) & 63. Keys already due sit in
// level 0's current slot. Keys beyond the top window wait in one overflow
// bucket until the wheel's time reaches that window, so every key is
// expired at its exact time, however far away.
//
// Each bucket is an intrusive doubly linked list, and each level keeps a
// 64-bit bitmap of its non-empty slots. A map from key to entry makes Add
// (which also moves an existing key), Remove and Contains O(1).
//
// # Next and Advance
//
// Because placement is relative to now, level 0 holds only slots at or after
// now and a higher level only slots after now's slot there. The earliest
// non-empty bucket is therefore the lowest set bit of the lowest non-empty
// level, found with one [math/bits.TrailingZeros64] per level: that is
// [Wheel.Next]. It is exact for a key in level 0 and a lower bound for a
// key in a coarser level.
//
// [Wheel.Advance] repeatedly takes the earliest bucket that starts at or
// before its target, moves now to the bucket's start, and either expires
// the bucket (level 0) or cascades it, re-placing its keys one level down or
// more. It never ticks through empty buckets, so a jump of a year costs no
// more than one of a millisecond; each key cascades at most once per level.
// All keys of a millisecond are expired before those of a later one.
//
// # Memory
//
// Entries live in chunks of 1024 and link to each other by uint32 index, so
// an entry takes 32 bytes for an 8-byte key and 40 for a 16-byte one, a
// uint32 tag of the owner's included ([Wheel.AddTagged]),
// plus the key's slot in the map; BenchmarkBytesPerEntry reports the total.
// For keys without pointers (such as task.ID) neither the chunks nor the map
// hold pointers, so the garbage collector does not scan them. Removed entries
// are reused through a free list: the wheel does not shrink, and stays at
// the size of the most keys it has held.
package timingwheel
