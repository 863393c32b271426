-- Migration 0002, PostgreSQL: the schedules (recurring timers) of a database.
--
-- Schedules are few and small, so a database keeps them in one table,
-- toc_schedules, rather than one per task table. A migration is run once
-- per task table, so this one creates it with the first (.Index 0) and
-- renders to nothing for the others.
--
-- A schedule lives in the database of the shard its id names, and its id
-- names the shard of its (app, key) (Store.ShardFor), as a keyed task's
-- does: GetScheduleByKey reads one database, and two CreateSchedules of one
-- key meet on one unique index.
--
-- Columns (times are Unix milliseconds):
--   id            the schedule id, 16 bytes
--   app, schedule_key  the schedule's key: unique (CreateSchedule's ON
--                 CONFLICT, GetScheduleByKey); a deleted schedule's row is
--                 gone, so its key is free
--   state         the state code: 1 active, 2 paused, 3 ended (never
--                 renumber; schedules.go)
--   wake_at       WakeAt, NULL when zero (DueSchedules)
--   record        the whole schedule: a version byte, then JSON
--                 (record.EncodeSchedule)
{{- if eq .Index 0}}
CREATE TABLE IF NOT EXISTS toc_schedules (
    id           BYTEA    NOT NULL PRIMARY KEY,
    app          TEXT     COLLATE "C" NOT NULL,
    schedule_key BYTEA    NOT NULL,
    state        SMALLINT NOT NULL,
    wake_at      BIGINT,
    record       BYTEA    NOT NULL
);

-- CreateSchedule's ON CONFLICT (app, schedule_key) and GetScheduleByKey.
CREATE UNIQUE INDEX IF NOT EXISTS toc_schedules_key ON toc_schedules (app, schedule_key);

-- ListSchedules.
CREATE INDEX IF NOT EXISTS toc_schedules_list ON toc_schedules (app, id);

-- DueSchedules: only the schedules with something to do.
CREATE INDEX IF NOT EXISTS toc_schedules_wake ON toc_schedules (wake_at, id)
    WHERE wake_at IS NOT NULL;
{{- end}}
