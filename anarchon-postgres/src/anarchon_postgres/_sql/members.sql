-- The fleet's member list (rule M1), one statement. A schema made by a release before it gets it
-- on its next open (`_schema` runs it with the control tables, in the creating transaction,
-- under the schema's advisory lock), so it is IF NOT EXISTS. Placeholder: {members} is the
-- quoted name (see `_names`). The columns must match `_schema._MEMBERS`, which opening checks.

-- One row per live (or lately ended) instance: announce upserts it, members reads the live
-- ones of a prefix in one SELECT.
CREATE TABLE IF NOT EXISTS {members} (
    prefix text NOT NULL,
    instance text NOT NULL,
    started_ms bigint NOT NULL,
    seen_ms bigint NOT NULL,
    until_ms bigint NOT NULL,
    stats text NOT NULL,
    PRIMARY KEY (prefix, instance)
);
