-- The tables of a new schema, one statement each (`_schema` runs them in order, in the creating
-- transaction, under the schema's advisory lock). Placeholders: {runs}, {jobs}, {version} and
-- {index} are quoted names (see `_names`), {component} and {schema_version} literals. The
-- columns must match `_schema._RUNS`, `_JOBS` and `_VERSION`, which opening checks.

CREATE TABLE {runs} (
    prefix text NOT NULL,
    job text NOT NULL,
    slot bigint NOT NULL,
    status text NOT NULL,
    attempt integer NOT NULL,
    token text NOT NULL,
    holder text NOT NULL,
    claimed_at bigint,
    lease_until bigint,
    finished_at bigint,
    error text,
    keep_until bigint NOT NULL,
    PRIMARY KEY (prefix, job, slot)
);

-- L1 overlap: "another slot of the job running with lease_until >= now" is one seek.
CREATE INDEX {index} ON {runs} (prefix, job, lease_until) WHERE status = 'running';

-- One row per job: the claims' row lock and the L11 floor.
CREATE TABLE {jobs} (
    prefix text NOT NULL,
    job text NOT NULL,
    floor bigint,
    PRIMARY KEY (prefix, job)
);

CREATE TABLE {version} (
    component text NOT NULL PRIMARY KEY,
    version integer NOT NULL
);

INSERT INTO {version} (component, version) VALUES ({component}, {schema_version});
