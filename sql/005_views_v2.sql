-- Public views, version 2: the same names and columns as before, plus what people ask
-- first (when and why), readable by every SQL engine:
--   * actions gains reserved_at, closed_at (event times) and closing_reason (the reason
--     given to settle or fail);
--   * balances and balances_recomputed gain statement (the hypothesis' text);
--   * JSON is read with ->> (plain SQL values in SQLite, DuckDB and others) and every
--     computed column is CAST to its type (BIGINT for integers, TEXT for text), so tools
--     that read the declared types (DuckDB's SQLite reader, pandas) get integers and text;
--   * no JOIN without ON.
-- Only views change here; no row is touched. Older ledgers get these views when opened.

DROP VIEW case_status;
DROP VIEW actions;
DROP VIEW balances;
DROP VIEW balances_recomputed;

-- One row: the case, its lifecycle state and the head of the chain.
CREATE VIEW case_status AS
SELECT
    ci.case_id AS case_id,
    ci.package_id AS package_id,
    CAST((SELECT state FROM lifecycle ORDER BY seq DESC LIMIT 1) AS TEXT) AS state,
    CAST((SELECT COALESCE(MAX(revision), 0) FROM revisions) AS BIGINT) AS analysis_revision,
    CAST((SELECT MAX(seq) FROM events) AS BIGINT) AS package_generation,
    CAST((SELECT sha256 FROM events ORDER BY seq DESC LIMIT 1) AS TEXT) AS head_sha256
FROM case_identity AS ci;

-- One row per (revision, hypothesis_id, action_id), with its times and closing reason.
CREATE VIEW actions AS
SELECT
    r.revision AS revision,
    r.hypothesis_id AS hypothesis_id,
    r.action_id AS action_id,
    r.action AS action,
    r.cost_units AS cost_units,
    CAST(CASE
        WHEN c.outcome IS NOT NULL THEN c.outcome
        WHEN res.action_id IS NOT NULL THEN 'awaiting_assessment'
        ELSE 'reserved'
    END AS TEXT) AS status,
    res.novelty_score AS novelty_score,
    c.semantic_score AS semantic_score,
    c.information_score AS information_score,
    c.reward_units AS reward_units,
    reserved.created_at AS reserved_at,
    closed.created_at AS closed_at,
    CAST(closed.body ->> '$.request.reason' AS TEXT) AS closing_reason
FROM reservations AS r
JOIN events AS reserved ON reserved.seq = r.seq
LEFT JOIN results AS res
    ON res.revision = r.revision AND res.hypothesis_id = r.hypothesis_id AND res.action_id = r.action_id
LEFT JOIN closings AS c
    ON c.revision = r.revision AND c.hypothesis_id = r.hypothesis_id AND c.action_id = r.action_id
LEFT JOIN events AS closed ON closed.seq = c.seq;

-- One row per (revision, hypothesis_id), read from the newest budget event of each
-- revision (which carries every account's state), so the cost does not grow with history.
CREATE VIEW balances AS
SELECT
    r.revision AS revision,
    CAST(a.value ->> '$.hypothesis_id' AS TEXT) AS hypothesis_id,
    CAST(a.value ->> '$.initial_units' AS BIGINT) AS initial_units,
    CAST(a.value ->> '$.granted_units' AS BIGINT) AS granted_units,
    CAST(a.value ->> '$.spent_units' AS BIGINT) AS spent_units,
    CAST(a.value ->> '$.rewarded_units' AS BIGINT) AS rewarded_units,
    CAST(a.value ->> '$.initial_units' AS BIGINT) + CAST(a.value ->> '$.granted_units' AS BIGINT)
        - CAST(a.value ->> '$.spent_units' AS BIGINT) + CAST(a.value ->> '$.rewarded_units' AS BIGINT)
        AS remaining_units,
    CAST(a.value ->> '$.status' AS TEXT) AS status,
    CAST(a.value ->> '$.terminal_reason' AS TEXT) AS terminal_reason,
    CAST(a.value ->> '$.pending_action_id' AS TEXT) AS pending_action_id,
    CAST(a.value ->> '$.low_information_streak' AS BIGINT) AS low_information_streak,
    CAST(a.value ->> '$.settled_actions' AS BIGINT) AS settled_actions,
    CAST(a.value ->> '$.failed_actions' AS BIGINT) AS failed_actions,
    h.statement AS statement
FROM revisions AS r
JOIN events AS e ON e.seq = (
    SELECT seq FROM events WHERE stream = 'budget' AND revision = r.revision
    ORDER BY stream_seq DESC LIMIT 1)
JOIN json_each(e.body, '$.accounts') AS a ON TRUE
JOIN hypotheses AS h
    ON h.revision = r.revision AND h.hypothesis_id = CAST(a.value ->> '$.hypothesis_id' AS TEXT);

-- The same columns re-derived from the helper rows (reservations, closings, grants,
-- terminations): an audit view whose cost grows with history. `ledger verify` compares it, as
-- `balances`, with the replay of the requests; the two views always agree (the tests check it).
CREATE VIEW balances_recomputed AS
WITH totals AS (
    SELECT
        a.revision AS revision,
        a.hypothesis_id AS hypothesis_id,
        a.initial_units AS initial_units,
        (SELECT COALESCE(SUM(g.units), 0) FROM grants AS g
          WHERE g.revision = a.revision AND g.hypothesis_id = a.hypothesis_id) AS granted_units,
        (SELECT COALESCE(SUM(r.cost_units), 0) FROM reservations AS r
          WHERE r.revision = a.revision AND r.hypothesis_id = a.hypothesis_id) AS spent_units,
        (SELECT COALESCE(SUM(c.reward_units), 0) FROM closings AS c
          WHERE c.revision = a.revision AND c.hypothesis_id = a.hypothesis_id) AS rewarded_units,
        (SELECT COUNT(*) FROM reservations AS r
          WHERE r.revision = a.revision AND r.hypothesis_id = a.hypothesis_id) AS reserved_actions,
        (SELECT COUNT(*) FROM closings AS c
          WHERE c.revision = a.revision AND c.hypothesis_id = a.hypothesis_id
            AND c.outcome = 'settled') AS settled_actions,
        (SELECT COUNT(*) FROM closings AS c
          WHERE c.revision = a.revision AND c.hypothesis_id = a.hypothesis_id
            AND c.outcome = 'failed') AS failed_actions,
        (SELECT r.action_id FROM reservations AS r
          WHERE r.revision = a.revision AND r.hypothesis_id = a.hypothesis_id
            AND NOT EXISTS (SELECT 1 FROM closings AS c
                             WHERE c.revision = r.revision AND c.hypothesis_id = r.hypothesis_id
                               AND c.action_id = r.action_id)
          ORDER BY r.seq DESC LIMIT 1) AS pending_action_id,
        -- consecutive closings since the last settle whose information beat the threshold
        (SELECT COUNT(*) FROM closings AS c
          WHERE c.revision = a.revision AND c.hypothesis_id = a.hypothesis_id
            AND c.seq > COALESCE((
                SELECT MAX(c2.seq) FROM closings AS c2
                JOIN policies AS p ON p.revision = a.revision
                 WHERE c2.revision = a.revision AND c2.hypothesis_id = a.hypothesis_id
                   AND c2.outcome = 'settled'
                   AND c2.information_score > CAST(p.policy ->> '$.low_information_threshold' AS BIGINT)
            ), 0)) AS low_information_streak,
        t.status AS terminal_status,
        t.terminal_reason AS terminal_reason,
        h.statement AS statement
    FROM accounts AS a
    JOIN hypotheses AS h
        ON h.revision = a.revision AND h.hypothesis_id = a.hypothesis_id
    LEFT JOIN terminations AS t
        ON t.revision = a.revision AND t.hypothesis_id = a.hypothesis_id
)
SELECT
    revision,
    hypothesis_id,
    CAST(initial_units AS BIGINT) AS initial_units,
    CAST(granted_units AS BIGINT) AS granted_units,
    CAST(spent_units AS BIGINT) AS spent_units,
    CAST(rewarded_units AS BIGINT) AS rewarded_units,
    CAST(initial_units + granted_units - spent_units + rewarded_units AS BIGINT) AS remaining_units,
    CAST(COALESCE(terminal_status, CASE WHEN reserved_actions > 0 THEN 'investigating' ELSE 'new' END) AS TEXT)
        AS status,
    terminal_reason,
    CAST(pending_action_id AS TEXT) AS pending_action_id,
    CAST(low_information_streak AS BIGINT) AS low_information_streak,
    CAST(settled_actions AS BIGINT) AS settled_actions,
    CAST(failed_actions AS BIGINT) AS failed_actions,
    statement
FROM totals;
