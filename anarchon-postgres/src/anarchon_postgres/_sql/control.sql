-- The control tables (pause and trigger, rules P1 and X1), one statement each. A schema made by
-- a release before them gets them on its next open (`_schema` runs these in the creating
-- transaction, under the schema's advisory lock), so each is IF NOT EXISTS. Placeholders:
-- {pauses}, {triggers} and {triggers_new} are quoted names (see `_names`). The columns must
-- match `_schema._PAUSES` and `_TRIGGERS`, which opening checks.

-- One row per paused job: the claim functions read it by its key, in the claim's statement (P1).
CREATE TABLE IF NOT EXISTS {pauses} (
    prefix text NOT NULL,
    job text NOT NULL,
    since_ms bigint NOT NULL,
    until_ms bigint,
    reason text NOT NULL,
    paused_by text NOT NULL,
    PRIMARY KEY (prefix, job)
);

-- One row per run asked for (X1); instances read the new ones by requested_at.
CREATE TABLE IF NOT EXISTS {triggers} (
    prefix text NOT NULL,
    job text NOT NULL,
    slot bigint NOT NULL,
    requested_at bigint NOT NULL,
    reason text NOT NULL,
    requested_by text NOT NULL,
    PRIMARY KEY (prefix, job, slot)
);

CREATE INDEX IF NOT EXISTS {triggers_new} ON {triggers} (prefix, requested_at);
