-- Queries of the PostgreSQL dialect.
--
-- Each "-- name:" line starts a text/template. The store renders it once per
-- task table ({{.Table}}), once per database ({{.Tables}}: the queries that
-- read every table of a database in one UNION ALL, so a scan of all shards
-- costs one round trip per database), or with no table at all (schema
-- bookkeeping). {{arg "x"}} is the parameter x; here each name gets one
-- number ($1, $2, …) however often it appears. The multi-row statements
-- (UpdateMany's reads and writes, Create's insert) take each column as one
-- array, {{colarg c}}, whatever the number of rows: their text is one per
-- table, so the driver prepares each once and PostgreSQL plans it once,
-- where a VALUES list of n rows was a statement of its own for every n.
-- Times are Unix milliseconds; state 1 is scheduled (state.go).
--
-- Comment lines are dropped when a query is read.

-- name: get
SELECT record FROM {{.Table}} WHERE id = {{arg "id"}}

-- name: get_by_key
SELECT record FROM {{.Table}} WHERE app = {{arg "app"}} AND task_key = {{arg "key"}}

-- name: get_for_update
SELECT record FROM {{.Table}} WHERE id = {{arg "id"}} FOR UPDATE

-- name: get_for_update_no_sync
-- get_for_update for UpdateOpts.NoSync: the transaction's commit will not
-- wait for its WAL to be flushed (set_config's true: until the transaction
-- ends). A crash of toc keeps the write; a crash of the server or the
-- machine may lose it. In the WHERE clause rather than a SET LOCAL of its
-- own, to spare a round trip on every write of the delivery path. When no
-- row matches it may not run, and then nothing is written anyway.
SELECT record FROM {{.Table}}
WHERE id = {{arg "id"}} AND set_config('synchronous_commit', 'off', true) IS NOT NULL
FOR UPDATE

-- name: get_many_for_update
-- UpdateMany's read of .Rows tasks of one table. Locked in id order, as
-- every UpdateMany locks its rows, so that two cannot deadlock.
SELECT id, record FROM {{.Table}}
WHERE id = ANY({{colarg 0}}::bytea[])
ORDER BY id FOR UPDATE

-- name: get_many_for_update_no_sync
-- get_many_for_update for UpdateOpts.NoSync, as get_for_update_no_sync.
SELECT id, record FROM {{.Table}}
WHERE id = ANY({{colarg 0}}::bytea[])
  AND set_config('synchronous_commit', 'off', true) IS NOT NULL
ORDER BY id FOR UPDATE

-- name: insert
-- A key already taken makes the row a no-op: the store then reads the
-- holder with key_holder. Any other conflict (the id) is an error.
INSERT INTO {{.Table}} (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record)
SELECT * FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::text[], {{colarg 2}}::bytea[], {{colarg 3}}::bigint[],
    {{colarg 4}}::text[], {{colarg 5}}::bigint[], {{colarg 6}}::bigint[], {{colarg 7}}::bigint[], {{colarg 8}}::bytea[])
ON CONFLICT (app, task_key) DO NOTHING

-- name: key_holder
-- Read committed: each statement sees what was committed before it began, so
-- this sees the holder of a key the insert just found taken. A Sweep may
-- delete it in between (DO NOTHING locks nothing); the store then inserts
-- again.
SELECT id, record FROM {{.Table}} WHERE app = {{arg "app"}} AND task_key = {{arg "key"}}

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
-- update of .Rows tasks of one table at once. The VALUES are cast: their
-- parameters would be text otherwise.
UPDATE {{.Table}} AS t
SET state = v.state, target_kind = v.target_kind, wake_at = v.wake_at,
    next_attempt_at = v.next_attempt_at, finished_at = v.finished_at,
    record = v.record
FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::bigint[], {{colarg 2}}::text[], {{colarg 3}}::bigint[],
    {{colarg 4}}::bigint[], {{colarg 5}}::bigint[], {{colarg 6}}::bytea[])
    AS v (id, state, target_kind, wake_at, next_attempt_at, finished_at, record)
WHERE t.id = v.id

-- name: sweep
-- Deletes the limit oldest finished tasks before cutoff of one table. The
-- outer finished_at test is re-checked on the row as it is when the DELETE
-- locks it, so a task an Update took out of a final state meanwhile stays.
DELETE FROM {{.Table}}
WHERE finished_at < {{arg "cutoff"}} AND id IN (
    SELECT id FROM {{.Table}} WHERE finished_at < {{arg "cutoff"}}
    ORDER BY finished_at, id LIMIT {{arg "limit"}})

-- name: wakeups
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, wake_at, state, target_kind FROM {{$t}}
 WHERE wake_at IS NOT NULL AND (wake_at, id) > ({{arg "after_ms"}}, {{arg "after_id"}})
   AND wake_at <= {{arg "until_ms"}}
 ORDER BY wake_at, id LIMIT {{arg "limit"}})
{{- end}}
ORDER BY wake_at, id LIMIT {{arg "limit"}}

-- name: claimable
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
(SELECT id, next_attempt_at FROM {{$t}}
 WHERE state = 1 AND target_kind = 'pull' AND app = {{arg "app"}}
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
-- Held until the migration transaction ends. Advisory locks are per
-- database, as the schema is.
SELECT pg_advisory_xact_lock(hashtext('toc_schema_migrations'))

-- name: create_migrations
CREATE TABLE IF NOT EXISTS toc_schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at BIGINT  NOT NULL
)

-- name: create_meta
CREATE TABLE IF NOT EXISTS toc_meta (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
)

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
 WHERE wake_at IS NOT NULL AND (wake_at, id) > ({{arg "after_ms"}}, {{arg "after_id"}})
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
-- A key already taken makes the insert a no-op: the store then reads the
-- holder with schedule_key_holder. A taken id is an error.
INSERT INTO toc_schedules (id, app, schedule_key, state, wake_at, record)
VALUES ({{arg "id"}}, {{arg "app"}}, {{arg "key"}}, {{arg "state"}}, {{arg "wake_at"}}, {{arg "record"}})
ON CONFLICT (app, schedule_key) DO NOTHING

-- name: schedule_key_holder
-- Read committed: sees the holder the insert just found.
SELECT id, record FROM toc_schedules WHERE app = {{arg "app"}} AND schedule_key = {{arg "key"}}

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

-- name: get_many_no_sync
-- UpdateMany's read for UpdateOpts.Optimistic: get_many_for_update_no_sync
-- without the row locks. What the transaction writes afterwards is fenced
-- by the records read here (update_many_fenced).
SELECT id, record FROM {{.Table}}
WHERE id = ANY({{colarg 0}}::bytea[])
  AND set_config('synchronous_commit', 'off', true) IS NOT NULL

-- name: update_many_fenced
-- update_many for UpdateOpts.Optimistic: each row is written only if its
-- record is still the one read (column old), byte for byte; the ids written
-- come back, so the store tells the tasks that changed meanwhile
-- (ErrConflict) from those stored.
UPDATE {{.Table}} AS t
SET state = v.state, target_kind = v.target_kind, wake_at = v.wake_at,
    next_attempt_at = v.next_attempt_at, finished_at = v.finished_at,
    record = v.record
FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::bigint[], {{colarg 2}}::text[], {{colarg 3}}::bigint[],
    {{colarg 4}}::bigint[], {{colarg 5}}::bigint[], {{colarg 6}}::bytea[], {{colarg 7}}::bytea[])
    AS v (id, state, target_kind, wake_at, next_attempt_at, finished_at, record, old)
WHERE t.id = v.id AND t.record = v.old
RETURNING t.id

-- The multi-table statements: one statement for the rows of every table of
-- a database, each row's table in a last column (tbl, its number in the
-- database), so that a batch spread over the shards costs one statement,
-- not one per table. Optional: a dialect without them runs the per-table
-- ones above.

-- name: insert_tables
-- insert of rows of any table of the database; the ids of the rows inserted
-- come back (a row whose key is taken is skipped, as by insert).
WITH v AS (
    SELECT * FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::text[], {{colarg 2}}::bytea[], {{colarg 3}}::bigint[],
        {{colarg 4}}::text[], {{colarg 5}}::bigint[], {{colarg 6}}::bigint[], {{colarg 7}}::bigint[], {{colarg 8}}::bytea[],
        {{colarg 9}}::bigint[])
        AS v (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record, tbl)
){{range $i, $t := .Tables}},
i{{$i}} AS (
    INSERT INTO {{$t}} (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record)
    SELECT id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record FROM v WHERE tbl = {{$i}}
    ON CONFLICT (app, task_key) DO NOTHING
    RETURNING id
){{end}}
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}SELECT id FROM i{{$i}}{{end}}

-- name: insert_tables_new
-- insert_tables for tasks whose keys are free: a key taken fails the
-- statement (unique_violation), which rolls back as a whole, and the store
-- then runs the create again in a transaction, with insert_tables. Run on
-- its own, a statement is a transaction: a gathered create is one round
-- trip instead of a BEGIN, an insert and a COMMIT.
WITH v AS (
    SELECT * FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::text[], {{colarg 2}}::bytea[], {{colarg 3}}::bigint[],
        {{colarg 4}}::text[], {{colarg 5}}::bigint[], {{colarg 6}}::bigint[], {{colarg 7}}::bigint[], {{colarg 8}}::bytea[],
        {{colarg 9}}::bigint[])
        AS v (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record, tbl)
){{range $i, $t := .Tables}},
i{{$i}} AS (
    INSERT INTO {{$t}} (id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record)
    SELECT id, app, task_key, state, target_kind, wake_at, next_attempt_at, finished_at, record FROM v WHERE tbl = {{$i}}
    RETURNING id
){{end}}
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}SELECT id FROM i{{$i}}{{end}}

-- name: get_many_no_sync_tables
-- get_many_no_sync of rows of any table of the database. The store runs it
-- outside a transaction (it locks nothing), and the write that follows,
-- update_many_fenced_tables, turns synchronous_commit off itself.
WITH v AS (SELECT * FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::bigint[]) AS v (id, tbl))
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}
SELECT id, record FROM {{$t}} WHERE id IN (SELECT id FROM v WHERE tbl = {{$i}})
{{- end}}

-- name: update_many_fenced_tables
-- update_many_fenced of rows of any table of the database. The store runs
-- it as a transaction of its own, which commits as get_many_no_sync's:
-- without waiting for its WAL to be flushed.
WITH v AS (
    SELECT * FROM unnest({{colarg 0}}::bytea[], {{colarg 1}}::bigint[], {{colarg 2}}::text[], {{colarg 3}}::bigint[],
        {{colarg 4}}::bigint[], {{colarg 5}}::bigint[], {{colarg 6}}::bytea[], {{colarg 7}}::bytea[], {{colarg 8}}::bigint[])
        AS v (id, state, target_kind, wake_at, next_attempt_at, finished_at, record, old, tbl)
    WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
){{range $i, $t := .Tables}},
u{{$i}} AS (
    UPDATE {{$t}} AS t
    SET state = v.state, target_kind = v.target_kind, wake_at = v.wake_at,
        next_attempt_at = v.next_attempt_at, finished_at = v.finished_at,
        record = v.record
    FROM v
    WHERE v.tbl = {{$i}} AND t.id = v.id AND t.record = v.old
    RETURNING t.id
){{end}}
{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}SELECT id FROM u{{$i}}{{end}}
