-- Migration 0001, MySQL and MariaDB: the task table of one shard.
--
-- Every migration is a text/template run once per task table, with {{.Table}}
-- its name (toc_tasks_0000, toc_tasks_0001, …) and {{.Index}} its number in
-- the database. MySQL commits DDL implicitly, so the store applies a
-- database's migrations under GET_LOCK instead of in a transaction, and
-- every statement must be safe to run again after a failure (IF NOT EXISTS).
--
-- Columns (times are Unix milliseconds): as in the PostgreSQL migration. The
-- binary types compare bytewise, as the other backends do: an app or key
-- that differs only in case or trailing spaces is another app or key.
--   task_key  NULL for a task without a key: NULLs never collide in the
--             unique index (MySQL has no partial unique index, and needs
--             none: a finished task keeps its key until Sweep deletes the
--             row, so a key column with NULL for "no key" is all it takes).
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id              BINARY(16)      NOT NULL,
    app             VARBINARY(255)  NOT NULL,
    task_key        VARBINARY(256)  NULL,
    state           SMALLINT        NOT NULL,
    target_kind     VARBINARY(16)   NOT NULL,
    wake_at         BIGINT          NULL,
    next_attempt_at BIGINT          NOT NULL,
    finished_at     BIGINT          NULL,
    record          LONGBLOB        NOT NULL,
    PRIMARY KEY (id),
    -- Create's ON DUPLICATE KEY and GetByKey.
    UNIQUE KEY toc_key (app, task_key),
    -- Wakeups: covering (InnoDB appends the primary key to every index).
    KEY toc_wake (wake_at, id, state, target_kind),
    -- Claimable.
    KEY toc_claim (app, target_kind, state, next_attempt_at, id),
    -- List.
    KEY toc_list (app, state, id),
    -- Sweep.
    KEY toc_finished (finished_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = binary ROW_FORMAT = DYNAMIC;
