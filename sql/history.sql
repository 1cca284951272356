-- Objects an earlier case-ledger wrote otherwise than its migration of the same version writes now.
-- A migration's file was edited in place only before the project's first release outside its own
-- repository; a ledger such a build made still verifies: verify takes each text below, for its
-- version, as the shipped one (docs/files.md). The next writer's upgrade replaces it.
-- Each statement is headed "-- version: N", the schema version whose migration made it.

-- version: 4
-- scope_usage as 004_scopes.sql made it from commit 1a26cb6 to 630109d (scalar MAX and COUNT(*),
-- which DuckDB's SQLite reader cannot plan; the view's rows are the same).
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
        (SELECT COUNT(*) FROM reservations AS r
          WHERE (b.in_revision IS NULL OR r.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR r.hypothesis_id = b.in_hypothesis)) AS actions,
        (SELECT COALESCE(SUM(m.cost_usd_millicents), 0) FROM result_costs AS m
          WHERE (b.in_revision IS NULL OR m.revision = b.in_revision)
            AND (b.in_hypothesis IS NULL OR m.hypothesis_id = b.in_hypothesis)) AS cost_usd_millicents,
        MAX(0, ((strftime('%s', substr(n.created_at, 1, 19)) * 1000000 + CAST(substr(n.created_at, 21, 6) AS INTEGER))
              - (strftime('%s', substr(b.origin_at, 1, 19)) * 1000000 + CAST(substr(b.origin_at, 21, 6) AS INTEGER)))
             / 1000) AS duration_ms
    FROM bounds AS b, now AS n
)
SELECT
    b.scope_type AS scope_type,
    b.scope_id AS scope_id,
    l.dimension AS dimension,
    l.declared AS declared,
    CASE l.dimension WHEN 'units' THEN u.units WHEN 'actions' THEN u.actions
        WHEN 'duration_ms' THEN u.duration_ms ELSE u.cost_usd_millicents END AS consumed,
    MAX(0, l.declared - CASE l.dimension WHEN 'units' THEN u.units WHEN 'actions' THEN u.actions
        WHEN 'duration_ms' THEN u.duration_ms ELSE u.cost_usd_millicents END) AS remaining,
    b.warning_bps AS warning_bps,
    b.on_exhausted AS on_exhausted
FROM bounds AS b
JOIN used AS u ON u.seq = b.seq
JOIN scope_limits AS l ON l.seq = b.seq
;
