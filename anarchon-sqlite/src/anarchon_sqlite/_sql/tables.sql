-- The tables of a new file, one statement each (`_schema` runs them in order inside the
-- creating BEGIN IMMEDIATE). Placeholders: {schema}, {runs} and {jobs} are the tables' names
-- (`_schema.SCHEMA`, `RUNS`, `JOBS`), {component} and {version} the schema version's row. The
-- columns must match `_schema._TABLES`, which opening checks.

CREATE TABLE {schema} (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE {runs} (
    prefix TEXT NOT NULL,
    job TEXT NOT NULL,
    slot INTEGER NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    token TEXT NOT NULL,
    holder TEXT NOT NULL,
    claimed_at INTEGER,
    lease_until INTEGER,
    finished_at INTEGER,
    error TEXT,
    keep_until INTEGER NOT NULL,
    PRIMARY KEY (prefix, job, slot)
) WITHOUT ROWID;

-- L1 overlap: "another slot of the job running with lease_until >= now" is one index seek.
CREATE INDEX {runs}_live ON {runs} (prefix, job, lease_until)
    WHERE status = 'running';

-- One row per job: the L11 floor.
CREATE TABLE {jobs} (
    prefix TEXT NOT NULL,
    job TEXT NOT NULL,
    floor INTEGER NOT NULL,
    PRIMARY KEY (prefix, job)
) WITHOUT ROWID;

INSERT INTO {schema} (component, version) VALUES ('{component}', {version});
