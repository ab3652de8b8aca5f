-- The fleet's member list (rule M1), one statement. A file made by a release before it gets it on
-- its next open, in the same transaction as the control tables, so it is IF NOT EXISTS.
-- Placeholder: {members} is the table's name (`_schema.MEMBERS`). The columns must match
-- `_schema._CONTROL`, which opening checks.

-- One row per live (or lately expired) instance; announce replaces it, members reads the live
-- ones of a prefix in one SELECT.
CREATE TABLE IF NOT EXISTS {members} (
    prefix TEXT NOT NULL,
    instance TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL,
    until_ms INTEGER NOT NULL,
    stats TEXT NOT NULL,
    PRIMARY KEY (prefix, instance)
) WITHOUT ROWID;
