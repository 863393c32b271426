-- Queries of the MySQL / MariaDB dialect.
--
-- Each "-- name:" line starts a text/template. The store renders it once per
-- task table ({{.Table}}), once per database ({{.Tables}}: the queries that
-- read every table of a database in one UNION ALL, so a scan of all shards
-- costs one round trip per database), or with no table at all (schema
-- bookkeeping). {{arg "x"}} is the parameter x; here every use is a "?" of
-- its own, and the store passes x again for each. {{values .Rows n}} is the
-- VALUES list of a multi-row insert of n columns, and {{rowarg r c}} the
-- parameter of row r, column c, for a query that lays out its .Rows rows
-- itself. Times are Unix milliseconds; state 1 is scheduled (state.go).
--
-- There are no get_for_update_no_sync and get_many_for_update_no_sync
-- queries: InnoDB's flushing (innodb_flush_log_at_trx_commit) is global, so
-- UpdateOpts.NoSync changes nothing here.
--
-- Comment lines are dropped when a query is read.

-- name: get
SELECT record FROM {{.Table}} WHERE id = {{arg "id"}}

-- name: get_by_key
SELECT record FROM {{.Table}} WHERE app = {{arg "app"}} AND task_key = {{arg "key"}}

-- name: get_for_update
SELECT record FROM {{.Table}} WHERE id = {{arg "id"}} FOR UPDATE

-- name: get_many_for_update
-- UpdateMany's read of .Rows tasks of one table: a range read of the
-- primary key (forced: a scan would lock every row it passes), which locks
-- the rows in id order, as every UpdateMany locks its rows, so that two
-- cannot deadlock.
SELECT id, record FROM {{.Table}} FORCE INDEX (PRIMARY)
WHERE id IN ({{range $r := .Rows}}{{if $r}}, {{end}}{{rowarg $r 0}}{{end}})
ORDER BY id FOR UPDATE

-- name: insert
-- A row whose key (or id) is taken changes nothing and counts 0 in the
-- affected rows (the driver's clientFoundRows is off), and leaves the
-- holder locked until the transaction ends. INSERT IGNORE would also turn
-- other errors (a too-long value) into warnings.
INSERT INTO {{.Table}} (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record)
VALUES {{values .Rows 9}}
ON DUPLICATE KEY UPDATE id = id

-- name: key_holder
-- A locking read: it sees the latest committed row whatever the isolation
-- level, and the insert already holds its lock.
SELECT id, record FROM {{.Table}} WHERE app = {{arg "app"}} AND task_key = {{arg "key"}} FOR UPDATE

-- name: delete_claim
-- Deletes a key claim (state 0, claim.go) whose task is gone.
DELETE FROM {{.Table}} WHERE id = {{arg "id"}} AND state = 0

-- name: update
UPDATE {{.Table}}
SET state = {{arg "state"}}, target_kind = {{arg "kind"}}, wake_at = {{arg "wake_at"}},
    next_attempt_at = {{arg "next_attempt_at"}}, finished_at = {{arg "finished_at"}},
    record = {{arg "record"}}
WHERE id = {{arg "id"}}

-- name: update_many
-- update of .Rows tasks of one table at once: a join of the table with
-- their rows (a UNION ALL, which MySQL and MariaDB both take). The hints
-- make it read those rows first, then each task by its id: left to itself
-- the optimizer scans a small table, locking rows of other transactions'
-- batches, and deadlocks with them.
UPDATE (
{{- range $r := .Rows}}
    {{if $r}}UNION ALL {{end}}SELECT {{rowarg $r 0}} AS id, {{rowarg $r 1}} AS state, {{rowarg $r 2}} AS target_kind,
           {{rowarg $r 3}} AS wake_at, {{rowarg $r 4}} AS next_attempt_at,
           {{rowarg $r 5}} AS finished_at, {{rowarg $r 6}} AS record
{{- end}}
) AS v STRAIGHT_JOIN {{.Table}} AS t FORCE INDEX (PRIMARY) ON t.id = v.id
SET t.state = v.state, t.target_kind = v.target_kind, t.wake_at = v.wake_at,
    t.next_attempt_at = v.next_attempt_at, t.finished_at = v.finished_at,
    t.record = v.record

-- name: sweep
-- Deletes the limit oldest finished tasks before cutoff of one table.
DELETE FROM {{.Table}} WHERE finished_at < {{arg "cutoff"}}
ORDER BY finished_at, id LIMIT {{arg "limit"}}

-- name: wakeups
-- MySQL does not range-scan an index for a row comparison like
-- (wake_at, id) > (?, ?), hence its expansion.
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, wake_at, state, target_kind FROM {{$t}}
 WHERE wake_at >= {{arg "after_ms"}}
   AND (wake_at > {{arg "after_ms"}} OR id > {{arg "after_id"}})
   AND wake_at <= {{arg "until_ms"}}
 ORDER BY wake_at, id LIMIT {{arg "limit"}})
{{- end}}
ORDER BY wake_at, id LIMIT {{arg "limit"}}

-- name: claimable
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, next_attempt_at FROM {{$t}}
 WHERE app = {{arg "app"}} AND target_kind = 'pull' AND state = 1
   AND next_attempt_at <= {{arg "now_ms"}}
 ORDER BY next_attempt_at, id LIMIT {{arg "limit"}})
{{- end}}
ORDER BY next_attempt_at, id LIMIT {{arg "limit"}}

-- name: list
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, record FROM {{$t}}
 WHERE app = {{arg "app"}} AND state = {{arg "state"}} AND id > {{arg "after_id"}}
 ORDER BY id LIMIT {{arg "limit"}})
{{- end}}
ORDER BY id LIMIT {{arg "limit"}}

-- name: sweepable
-- The candidates of Sweep: the store keeps the limit oldest of all shards
-- and then deletes, per table, as many as it kept of that table.
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, finished_at FROM {{$t}}
 WHERE finished_at < {{arg "cutoff"}}
 ORDER BY finished_at, id LIMIT {{arg "limit"}})
{{- end}}
ORDER BY finished_at, id LIMIT {{arg "limit"}}

-- name: migrate_lock
-- GET_LOCK names are server-wide and at most 64 characters: this one is
-- per database. Held by the session until migrate_unlock.
SELECT GET_LOCK(CONCAT('toc_migrate:', SHA1(DATABASE())), {{arg "timeout_s"}})

-- name: migrate_unlock
SELECT RELEASE_LOCK(CONCAT('toc_migrate:', SHA1(DATABASE())))

-- name: create_migrations
CREATE TABLE IF NOT EXISTS toc_schema_migrations (
    version    INT    NOT NULL PRIMARY KEY,
    applied_at BIGINT NOT NULL
) ENGINE = InnoDB

-- name: create_meta
CREATE TABLE IF NOT EXISTS toc_meta (
    name  VARBINARY(64)  NOT NULL PRIMARY KEY,
    value VARBINARY(255) NOT NULL
) ENGINE = InnoDB

-- name: meta_get
SELECT value FROM toc_meta WHERE name = {{arg "name"}}

-- name: meta_put
INSERT INTO toc_meta (name, value) VALUES ({{arg "name"}}, {{arg "value"}})

-- name: versions
SELECT version FROM toc_schema_migrations ORDER BY version

-- name: version_put
INSERT INTO toc_schema_migrations (version, applied_at) VALUES ({{arg "version"}}, {{arg "now_ms"}})

-- name: shard_wakeups
-- One shard's wake order, for the cluster's promotion to Redis.
SELECT id, wake_at, state, target_kind, app, task_key FROM {{.Table}}
 WHERE wake_at >= {{arg "after_ms"}}
   AND (wake_at > {{arg "after_ms"}} OR id > {{arg "after_id"}})
   AND wake_at <= {{arg "until_ms"}}
 ORDER BY wake_at, id LIMIT {{arg "limit"}}

-- name: counts
-- Tasks by app and state over every table of a database (the dashboard and
-- the toc_tasks gauge; a full index scan, so callers cache it).
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT app, state, COUNT(*) AS n FROM {{$t}} GROUP BY app, state)
{{- end}}

-- Schedules (store.Schedules): one toc_schedules table per database
-- (migration 0002), so these queries name no task table. A schedule is in
-- the database of the shard its id names; DueSchedules, ListSchedules and
-- CountSchedules read every database and merge.

-- name: schedule_get
SELECT record FROM toc_schedules WHERE id = {{arg "id"}}

-- name: schedule_get_by_key
SELECT record FROM toc_schedules WHERE app = {{arg "app"}} AND schedule_key = {{arg "key"}}

-- name: schedule_get_for_update
SELECT record FROM toc_schedules WHERE id = {{arg "id"}} FOR UPDATE

-- name: schedule_insert
-- A row whose key (or id) is taken changes nothing and counts 0 in the
-- affected rows, as insert does for tasks.
INSERT INTO toc_schedules (id, app, schedule_key, state, wake_at, record)
VALUES ({{arg "id"}}, {{arg "app"}}, {{arg "key"}}, {{arg "state"}}, {{arg "wake_at"}}, {{arg "record"}})
ON DUPLICATE KEY UPDATE id = id

-- name: schedule_key_holder
-- A locking read, as key_holder: it sees the latest committed row whatever
-- the isolation level.
SELECT id, record FROM toc_schedules WHERE app = {{arg "app"}} AND schedule_key = {{arg "key"}} FOR UPDATE

-- name: schedule_update
UPDATE toc_schedules
SET state = {{arg "state"}}, wake_at = {{arg "wake_at"}}, record = {{arg "record"}}
WHERE id = {{arg "id"}}

-- name: schedule_delete
DELETE FROM toc_schedules WHERE id = {{arg "id"}}

-- name: schedule_list
SELECT record FROM toc_schedules
WHERE app = {{arg "app"}} AND id > {{arg "after_id"}}
ORDER BY id LIMIT {{arg "limit"}}

-- name: schedule_due
SELECT record FROM toc_schedules
WHERE wake_at IS NOT NULL AND wake_at <= {{arg "until_ms"}}
ORDER BY wake_at, id LIMIT {{arg "limit"}}

-- name: schedule_counts
SELECT app, state, COUNT(*) AS n FROM toc_schedules GROUP BY app, state

-- name: schedule_app_count
-- CountAppSchedules: at most limit rows of the app's list index.
SELECT COUNT(*) FROM (
  SELECT 1 FROM toc_schedules WHERE app = {{arg "app"}} LIMIT {{arg "limit"}}
) AS capped
