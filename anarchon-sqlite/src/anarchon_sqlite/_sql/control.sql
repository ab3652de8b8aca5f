-- The control tables (pause and trigger, rules P1 and X1), one statement each. A file made by a
-- release before them gets them on its next open, so each is IF NOT EXISTS and `_schema` runs
-- them inside a BEGIN IMMEDIATE of their own. Placeholders: {pauses} and {triggers} are the
-- tables' names (`_schema.PAUSES`, `TRIGGERS`). The columns must match `_schema._CONTROL`.

-- One row per paused job: the claim reads it by its key, in the claim's own transaction (P1).
CREATE TABLE IF NOT EXISTS {pauses} (
    prefix TEXT NOT NULL,
    job TEXT NOT NULL,
    since_ms INTEGER NOT NULL,
    until_ms INTEGER,
    reason TEXT NOT NULL,
    paused_by TEXT NOT NULL,
    PRIMARY KEY (prefix, job)
) WITHOUT ROWID;

-- One row per run asked for (X1); instances read the new ones by requested_at.
CREATE TABLE IF NOT EXISTS {triggers} (
    prefix TEXT NOT NULL,
    job TEXT NOT NULL,
    slot INTEGER NOT NULL,
    requested_at INTEGER NOT NULL,
    reason TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    PRIMARY KEY (prefix, job, slot)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS {triggers}_new ON {triggers} (prefix, requested_at);
