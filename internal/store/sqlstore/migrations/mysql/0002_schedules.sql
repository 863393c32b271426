-- Migration 0002, MySQL and MariaDB: the schedules (recurring timers) of a
-- database.
--
-- As in the PostgreSQL migration: one table per database, toc_schedules,
-- created with the first task table (a migration is run once per task
-- table) and safe to run again (IF NOT EXISTS). A schedule lives in the
-- database of the shard its id names, which is the shard of its (app, key).
--
-- Columns (times are Unix milliseconds): as in the PostgreSQL migration.
-- The binary types compare bytewise, as for tasks.
{{- if eq .Index 0}}
CREATE TABLE IF NOT EXISTS toc_schedules (
    id           BINARY(16)     NOT NULL,
    app          VARBINARY(255) NOT NULL,
    schedule_key VARBINARY(256) NOT NULL,
    state        SMALLINT       NOT NULL,
    wake_at      BIGINT         NULL,
    record       LONGBLOB       NOT NULL,
    PRIMARY KEY (id),
    -- CreateSchedule's ON DUPLICATE KEY and GetScheduleByKey.
    UNIQUE KEY toc_key (app, schedule_key),
    -- ListSchedules.
    KEY toc_list (app, id),
    -- DueSchedules.
    KEY toc_wake (wake_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = binary ROW_FORMAT = DYNAMIC;
{{- end}}
