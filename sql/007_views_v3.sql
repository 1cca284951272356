-- Public views, version 3: scope_usage reads the same in every SQL engine (docs/sql.md).
--   * duration_ms is computed from the RFC 3339 text with integer arithmetic only (days from the
--     civil date, then seconds and microseconds), not with strftime('%s', …), which DuckDB's
--     SQLite reader cannot bind (it then read every column of the view as text);
--   * every division is exact ((a - a % b) / b), so engines whose "/" gives a fraction agree;
--   * every integer column is CAST to BIGINT (a 32-bit INTEGER could not hold 2^53 - 1).
-- Only the view changes here; no row is touched. Older ledgers get it when opened.

DROP VIEW scope_usage;

-- One row per established (scope_type, scope_id, dimension): the newest establishment's
-- effective limit and what the scope consumed, derived from the helper rows.
--   units: net units (reserved cost minus refunds; a pending reservation counts in full)
--   actions: reservations made; cost_usd_millicents: money reported with results
--   duration_ms: from the scope's first establishment to the newest event
-- A case scope counts every revision, revision:<n> one revision, hypothesis:<n>/<H> one account.
CREATE VIEW scope_usage AS
WITH current_limits AS (
    SELECT s.* FROM scope_establishments AS s
    WHERE s.seq = (SELECT MAX(s2.seq) FROM scope_establishments AS s2 WHERE s2.scope = s.scope)
),
newest AS (
    SELECT created_at FROM events ORDER BY seq DESC LIMIT 1
),
instants AS (
    SELECT created_at AS stamp FROM newest UNION SELECT origin_at FROM current_limits
),
-- the civil date shifted so that the year starts in March (y is never negative: +400 years)
civil AS (
    SELECT
        stamp,
        CAST(substr(stamp, 1, 4) AS BIGINT) + 400
            - CASE WHEN CAST(substr(stamp, 6, 2) AS BIGINT) <= 2 THEN 1 ELSE 0 END AS y,
        (CAST(substr(stamp, 6, 2) AS BIGINT) + 9) % 12 AS mp,
        CAST(substr(stamp, 9, 2) AS BIGINT) AS d,
        CAST(substr(stamp, 12, 2) AS BIGINT) * 3600 + CAST(substr(stamp, 15, 2) AS BIGINT) * 60
            + CAST(substr(stamp, 18, 2) AS BIGINT) AS second_of_day,
        CAST(substr(stamp, 21, 6) AS BIGINT) AS micros
    FROM instants
),
clock AS (
    SELECT
        stamp,
        CAST((365 * y + (y - y % 4) / 4 - (y - y % 100) / 100 + (y - y % 400) / 400
              + (153 * mp + 2 - (153 * mp + 2) % 5) / 5 + d) * 86400 + second_of_day AS BIGINT) AS seconds,
        micros
    FROM civil
),
used AS (
    SELECT
        b.seq AS seq,
        (SELECT COALESCE(SUM(r.cost_units), 0) FROM reservations AS r
          WHERE (b.scope_revision IS NULL OR r.revision = b.scope_revision)
            AND (b.scope_hypothesis IS NULL OR r.hypothesis_id = b.scope_hypothesis))
        - (SELECT COALESCE(SUM(k.reward_units), 0) FROM closings AS k
          WHERE (b.scope_revision IS NULL OR k.revision = b.scope_revision)
            AND (b.scope_hypothesis IS NULL OR k.hypothesis_id = b.scope_hypothesis)) AS units,
        (SELECT COUNT(r.seq) FROM reservations AS r
          WHERE (b.scope_revision IS NULL OR r.revision = b.scope_revision)
            AND (b.scope_hypothesis IS NULL OR r.hypothesis_id = b.scope_hypothesis)) AS actions,
        (SELECT COALESCE(SUM(m.cost_usd_millicents), 0) FROM result_costs AS m
          WHERE (b.scope_revision IS NULL OR m.revision = b.scope_revision)
            AND (b.scope_hypothesis IS NULL OR m.hypothesis_id = b.scope_hypothesis)) AS cost_usd_millicents,
        -- whole milliseconds, rounded down: seconds apart times 1000, plus the floor of the
        -- microseconds apart (between -999999 and 999999) divided by 1000
        (later.seconds - origin.seconds) * 1000
            + (later.micros - origin.micros
               - ((later.micros - origin.micros) % 1000 + 1000) % 1000) / 1000 AS duration_ms
    FROM current_limits AS b
    JOIN newest AS n ON TRUE
    JOIN clock AS later ON later.stamp = n.created_at
    JOIN clock AS origin ON origin.stamp = b.origin_at
),
-- (no scalar MAX(a, b) and no COUNT(*): DuckDB's SQLite reader re-plans the view and knows neither)
measured AS (
    SELECT b.scope_type, b.scope_id, l.dimension, l.declared, b.warning_bps, b.on_exhausted,
        CASE l.dimension WHEN 'units' THEN u.units WHEN 'actions' THEN u.actions
            WHEN 'duration_ms' THEN CASE WHEN u.duration_ms > 0 THEN u.duration_ms ELSE 0 END
            ELSE u.cost_usd_millicents END AS consumed
    FROM current_limits AS b
    JOIN used AS u ON u.seq = b.seq
    JOIN scope_limits AS l ON l.seq = b.seq
)
SELECT
    CAST(scope_type AS TEXT) AS scope_type,
    CAST(scope_id AS TEXT) AS scope_id,
    CAST(dimension AS TEXT) AS dimension,
    CAST(declared AS BIGINT) AS declared,
    CAST(consumed AS BIGINT) AS consumed,
    CAST(CASE WHEN declared > consumed THEN declared - consumed ELSE 0 END AS BIGINT) AS remaining,
    CAST(warning_bps AS BIGINT) AS warning_bps,
    CAST(on_exhausted AS TEXT) AS on_exhausted
FROM measured;
