// Package sqlstore is toc's [store.Store] on PostgreSQL or MySQL/MariaDB:
// the durable task library of cluster mode, after the "N databases × M
// tables" timeout center. One implementation serves both through
// database/sql; what differs lives in queries/<dialect>.sql and
// migrations/<dialect>/, embedded.
//
// # Sharding
//
// A store has len(Options.DSNs) × Options.Tables shards. Shard s is table
// toc_tasks_<s % Tables> of database s / Tables. Every task lives in its
// home shard, the one its id names ([task.ID.Shard]) modulo the shard count
// ([Store.Home]), so Get and Update read one table. A keyed task's key is
// held in the shard of its (app, key), so that GetByKey reads one table and
// two Creates of one key meet on one unique index: the engine makes a
// keyed task's id with [Store.ShardFor], so that both are one shard. A
// keyed task imported with an id made elsewhere keeps it: it lives in its
// home and holds its key with a key claim in its key's shard (claim.go). A
// keyless task may live in any shard.
//
// Wakeups, Claimable, List and Sweep read every shard: one query per
// database, a UNION ALL over its tables in which each table contributes at
// most limit rows in index order, the databases queried concurrently and
// their answers merged. A call costs one round trip per database (in
// parallel) and Tables short index range scans in each.
//
// The sharding can't change once a database is set up: each records in
// toc_meta the number of tables, of databases and its place among them,
// and Open refuses other Options. Resharding is not supported.
//
// # Schedules
//
// Schedules ([store.Schedules]) are few and small: a database keeps them in
// one table, toc_schedules (migration 0002), not one per task table. A
// schedule lives in the database of the shard of its (app, key) (ShardFor,
// as for a keyed task; the engine makes its id in that shard, and one
// imported with another id is read by id in its home's database first,
// then in the others), so
// GetScheduleByKey reads one database and CreateSchedule's insert meets any
// other of its key on one unique index. UpdateSchedule is one transaction
// (SELECT … FOR UPDATE, fn, UPDATE, COMMIT); ListSchedules, DueSchedules
// and CountSchedules read every database and merge (schedules.go).
//
// # Schema and migrations
//
// Open brings every database up to date before it returns. Migrations are
// numbered .sql files, each a template run once per task table; applied
// ones are listed in toc_schema_migrations. On PostgreSQL a database's
// migrations run in one transaction holding pg_advisory_xact_lock; on
// MySQL, whose DDL commits as it goes, on one session holding GET_LOCK,
// with statements that may run again (IF NOT EXISTS). Either way, nodes
// that start together apply each migration once.
//
// # Atomicity and durability
//
// Update is one transaction (SELECT … FOR UPDATE, fn, UPDATE, COMMIT) on
// one table. UpdateMany is one transaction per database its tasks are in,
// with one SELECT … FOR UPDATE and one UPDATE per table, and one fn for
// all (on PostgreSQL an optimistic UpdateMany is a read and one fenced
// UPDATE statement of every table per database, each row written only if
// unchanged since the read). Create is one transaction per database it
// writes to: a batch whose tasks span databases is atomic per database
// only (on PostgreSQL, when the batch's keys are free and it fits one
// statement, that transaction is a single INSERT statement of every
// table). Sweep deletes in one transaction per database.
//
// A write is durable when its COMMIT returns, as far as the server's
// settings make commits durable (PostgreSQL's synchronous_commit and
// fsync, InnoDB's innodb_flush_log_at_trx_commit = 1, their defaults).
// [store.UpdateOpts.NoSync] turns synchronous_commit off for that
// transaction on PostgreSQL; MySQL has no per-transaction equivalent and
// ignores it.
//
// # Idempotency
//
// The key is a nullable column under UNIQUE (app, task_key) on both
// dialects: a keyless task stores NULL, and NULLs never collide. A task
// keeps its key until Sweep deletes its row, so no partial index or second
// "live key" column is needed, and the two dialects behave alike. Create
// inserts with ON CONFLICT DO NOTHING (PostgreSQL) or ON DUPLICATE KEY
// UPDATE id = id (MySQL, which changes nothing and counts no row). When
// an insert stores fewer rows than it was given, Create reads the holder of
// each key by key: its own task (created) or an older one (returned with
// Created false).
//
// # Concurrency
//
// All methods are safe for concurrent use. Every call holds Store.mu shared
// for its duration and Close holds it exclusively, so Close waits for calls
// in flight and calls after it return [store.ErrClosed]. Row locks are the
// databases': Updates of one task wait for each other, Creates of one key
// too. UpdateMany locks its rows in one order (database, table, id), so
// UpdateManys and Updates can't deadlock each other. Create and Sweep
// transactions that lose a deadlock run again.
package sqlstore
