-- Scoped limits, authority and the soft gate (docs/scopes.md): helper tables of the
-- scope and limit events, the money tools report with their results, and the public
-- view scope_usage. Append-only like every ledger table (see 001_schema.sql).

-- One row per establishment of a scope (the first one and every change by its issuer).
-- limits live in scope_limits; scope_revision/scope_hypothesis say which accounts it holds
-- (NULL: all); origin_at is the time of the scope's first establishment.
CREATE TABLE scope_establishments (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    scope TEXT NOT NULL,
    scope_type TEXT NOT NULL CHECK (scope_type IN ('case', 'revision', 'hypothesis')),
    scope_id TEXT NOT NULL,
    scope_revision INTEGER,
    scope_hypothesis TEXT,
    establishment INTEGER NOT NULL,
    issuer TEXT NOT NULL,
    delegate TEXT,
    warning_bps INTEGER NOT NULL,
    on_exhausted TEXT NOT NULL CHECK (on_exhausted IN ('block_action', 'task_failed', 'scope_cancelled')),
    causation_seq INTEGER,
    origin_at TEXT NOT NULL
);
CREATE INDEX scope_establishments_by_scope ON scope_establishments (scope, seq);

-- The effective limit (the stricter of issuer's and delegate's) per dimension of one establishment.
CREATE TABLE scope_limits (
    seq INTEGER NOT NULL REFERENCES events (seq),
    scope TEXT NOT NULL,
    dimension TEXT NOT NULL CHECK (dimension IN ('units', 'actions', 'duration_ms', 'cost_usd_millicents')),
    declared INTEGER NOT NULL,
    PRIMARY KEY (seq, dimension)
);

-- limit.approaching: at most once per scope, dimension and establishment.
CREATE TABLE limit_warnings (
    scope TEXT NOT NULL,
    dimension TEXT NOT NULL,
    establishment_seq INTEGER NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    consumed INTEGER NOT NULL,
    PRIMARY KEY (scope, dimension, establishment_seq)
);

-- limit.exceeded: one row per refused reservation that met a limit.
CREATE TABLE limit_exceedances (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    scope TEXT NOT NULL,
    dimension TEXT NOT NULL,
    declared INTEGER NOT NULL,
    consumed_after INTEGER NOT NULL,
    on_exhausted TEXT NOT NULL
);

-- scope.increase_requested: a request only; it changes no limit.
CREATE TABLE increase_requests (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    scope TEXT NOT NULL,
    dimension TEXT NOT NULL,
    amount INTEGER NOT NULL,
    requester TEXT NOT NULL
);

-- External money a tool reported with an action's result (record_result's cost_usd_millicents).
CREATE TABLE result_costs (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    cost_usd_millicents INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, action_id)
);

CREATE TRIGGER scope_establishments_no_update BEFORE UPDATE ON scope_establishments
BEGIN
    SELECT RAISE(ABORT, 'append-only: scope_establishments rows cannot be updated');
END;
CREATE TRIGGER scope_establishments_no_delete BEFORE DELETE ON scope_establishments
BEGIN
    SELECT RAISE(ABORT, 'append-only: scope_establishments rows cannot be deleted');
END;
CREATE TRIGGER scope_limits_no_update BEFORE UPDATE ON scope_limits
BEGIN
    SELECT RAISE(ABORT, 'append-only: scope_limits rows cannot be updated');
END;
CREATE TRIGGER scope_limits_no_delete BEFORE DELETE ON scope_limits
BEGIN
    SELECT RAISE(ABORT, 'append-only: scope_limits rows cannot be deleted');
END;
CREATE TRIGGER limit_warnings_no_update BEFORE UPDATE ON limit_warnings
BEGIN
    SELECT RAISE(ABORT, 'append-only: limit_warnings rows cannot be updated');
END;
CREATE TRIGGER limit_warnings_no_delete BEFORE DELETE ON limit_warnings
BEGIN
    SELECT RAISE(ABORT, 'append-only: limit_warnings rows cannot be deleted');
END;
CREATE TRIGGER limit_exceedances_no_update BEFORE UPDATE ON limit_exceedances
BEGIN
    SELECT RAISE(ABORT, 'append-only: limit_exceedances rows cannot be updated');
END;
CREATE TRIGGER limit_exceedances_no_delete BEFORE DELETE ON limit_exceedances
BEGIN
    SELECT RAISE(ABORT, 'append-only: limit_exceedances rows cannot be deleted');
END;
CREATE TRIGGER increase_requests_no_update BEFORE UPDATE ON increase_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: increase_requests rows cannot be updated');
END;
CREATE TRIGGER increase_requests_no_delete BEFORE DELETE ON increase_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: increase_requests rows cannot be deleted');
END;
CREATE TRIGGER result_costs_no_update BEFORE UPDATE ON result_costs
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_costs rows cannot be updated');
END;
CREATE TRIGGER result_costs_no_delete BEFORE DELETE ON result_costs
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_costs rows cannot be deleted');
END;

CREATE TRIGGER scope_establishments_insert_guard BEFORE INSERT ON scope_establishments
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate scope_establishments key')
    WHERE EXISTS (SELECT 1 FROM scope_establishments WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: scope_establishments rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER scope_limits_insert_guard BEFORE INSERT ON scope_limits
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate scope_limits key')
    WHERE EXISTS (SELECT 1 FROM scope_limits WHERE seq = NEW.seq AND dimension = NEW.dimension);
    SELECT RAISE(ABORT, 'append-only: scope_limits rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER limit_warnings_insert_guard BEFORE INSERT ON limit_warnings
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate limit_warnings key')
    WHERE EXISTS (SELECT 1 FROM limit_warnings WHERE scope = NEW.scope AND dimension = NEW.dimension
                  AND establishment_seq = NEW.establishment_seq);
    SELECT RAISE(ABORT, 'append-only: limit_warnings rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER limit_exceedances_insert_guard BEFORE INSERT ON limit_exceedances
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate limit_exceedances key')
    WHERE EXISTS (SELECT 1 FROM limit_exceedances WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: limit_exceedances rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER increase_requests_insert_guard BEFORE INSERT ON increase_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate increase_requests key')
    WHERE EXISTS (SELECT 1 FROM increase_requests WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: increase_requests rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER result_costs_insert_guard BEFORE INSERT ON result_costs
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate result_costs key')
    WHERE EXISTS (SELECT 1 FROM result_costs WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id
                  AND action_id = NEW.action_id);
    SELECT RAISE(ABORT, 'append-only: result_costs rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;

-- One row per established (scope_type, scope_id, dimension): the newest establishment's
-- effective limit and what the scope consumed, derived from the helper rows.
--   units: net units (reserved cost minus refunds; a pending reservation counts in full)
--   actions: reservations made; cost_usd_millicents: money reported with results
--   duration_ms: from the scope's first establishment to the newest event
-- A case scope counts every revision, revision:<n> one revision, hypothesis:<n>/<H> one account.
CREATE VIEW scope_usage AS
WITH current AS (
    SELECT s.* FROM scope_establishments AS s
    WHERE s.seq = (SELECT MAX(s2.seq) FROM scope_establishments AS s2 WHERE s2.scope = s.scope)
),
bounds AS (
    SELECT c.*, c.scope_revision AS in_revision, c.scope_hypothesis AS in_hypothesis FROM current AS c
),
now AS (
    SELECT created_at FROM events ORDER BY seq DESC LIMIT 1
),
used AS (
    SELECT
        b.seq AS seq,
        (SELECT COALESCE(SUM(r.cost_units), 0) FROM reservations AS r
          WHERE (b.in_revision IS NULL OR r.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR r.hypothesis_id = b.in_hypothesis))
        - (SELECT COALESCE(SUM(k.reward_units), 0) FROM closings AS k
          WHERE (b.in_revision IS NULL OR k.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR k.hypothesis_id = b.in_hypothesis)) AS units,
        (SELECT COUNT(r.seq) FROM reservations AS r
          WHERE (b.in_revision IS NULL OR r.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR r.hypothesis_id = b.in_hypothesis)) AS actions,
        (SELECT COALESCE(SUM(m.cost_usd_millicents), 0) FROM result_costs AS m
          WHERE (b.in_revision IS NULL OR m.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR m.hypothesis_id = b.in_hypothesis)) AS cost_usd_millicents,
        ((CAST(strftime('%s', substr(n.created_at, 1, 19)) AS INTEGER) * 1000000
              + CAST(substr(n.created_at, 21, 6) AS INTEGER))
         - (CAST(strftime('%s', substr(b.origin_at, 1, 19)) AS INTEGER) * 1000000
              + CAST(substr(b.origin_at, 21, 6) AS INTEGER))) / 1000 AS duration_ms
    FROM bounds AS b, now AS n
),
-- (no scalar MAX(a, b) and no COUNT(*): DuckDB's SQLite reader re-plans the view and knows neither;
-- every column is CAST so other engines see its type)
measured AS (
    SELECT b.scope_type, b.scope_id, l.dimension, l.declared, b.warning_bps, b.on_exhausted,
        CASE l.dimension WHEN 'units' THEN u.units WHEN 'actions' THEN u.actions
            WHEN 'duration_ms' THEN CASE WHEN u.duration_ms > 0 THEN u.duration_ms ELSE 0 END
            ELSE u.cost_usd_millicents END AS consumed
    FROM bounds AS b
    JOIN used AS u ON u.seq = b.seq
    JOIN scope_limits AS l ON l.seq = b.seq
)
SELECT
    CAST(scope_type AS TEXT) AS scope_type,
    CAST(scope_id AS TEXT) AS scope_id,
    CAST(dimension AS TEXT) AS dimension,
    CAST(declared AS INTEGER) AS declared,
    CAST(consumed AS INTEGER) AS consumed,
    CAST(CASE WHEN declared > consumed THEN declared - consumed ELSE 0 END AS INTEGER) AS remaining,
    CAST(warning_bps AS INTEGER) AS warning_bps,
    CAST(on_exhausted AS TEXT) AS on_exhausted
FROM measured;
