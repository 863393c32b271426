-- Migration 0001, PostgreSQL: the task table of one shard.
--
-- Every migration is a text/template run once per task table, with {{.Table}}
-- its name (toc_tasks_0000, toc_tasks_0001, …) and {{.Index}} its number in
-- the database. The store applies a database's migrations in one transaction
-- under pg_advisory_xact_lock, so nodes that start together don't race.
--
-- Columns (times are Unix milliseconds):
--   id               the task id, 16 bytes; bytea sorts bytewise, as ids do
--   app, task_key    the idempotency key; task_key is NULL for a task without
--                    one, and NULLs never collide in the unique index. A
--                    finished task keeps its key until Sweep deletes the row.
--   state            the state code (state.go; never renumber)
--   target_kind      task.Target.Kind(): http, pull, amqp, nats
--   wake_at          WakeAt, NULL when zero
--   next_attempt_at  NextAttemptAt
--   finished_at      FinishedAt of a task in a final state, else NULL
--   record           the whole task: a version byte, then JSON (record.go)
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id              BYTEA    NOT NULL PRIMARY KEY,
    app             TEXT     COLLATE "C" NOT NULL,
    task_key        BYTEA,
    state           SMALLINT NOT NULL,
    target_kind     TEXT     NOT NULL,
    wake_at         BIGINT,
    next_attempt_at BIGINT   NOT NULL,
    finished_at     BIGINT,
    record          BYTEA    NOT NULL
);

-- Create's ON CONFLICT (app, task_key) and GetByKey.
CREATE UNIQUE INDEX IF NOT EXISTS {{.Table}}_key ON {{.Table}} (app, task_key);

-- Wakeups: covering, so the loader's scan reads no table pages.
CREATE INDEX IF NOT EXISTS {{.Table}}_wake ON {{.Table}} (wake_at, id)
    INCLUDE (state, target_kind) WHERE wake_at IS NOT NULL;

-- Claimable: only scheduled pull tasks (state 1 is scheduled).
CREATE INDEX IF NOT EXISTS {{.Table}}_claim ON {{.Table}} (app, next_attempt_at, id)
    WHERE state = 1 AND target_kind = 'pull';

-- List.
CREATE INDEX IF NOT EXISTS {{.Table}}_list ON {{.Table}} (app, state, id);

-- Sweep.
CREATE INDEX IF NOT EXISTS {{.Table}}_finished ON {{.Table}} (finished_at, id)
    WHERE finished_at IS NOT NULL;
