-- Public views (docs/architecture.md). Stable names and columns; every number is derived
-- here from the append-only helper rows, and `ledger verify` checks each view against
-- a replay of the requests.

-- One row: the case, its lifecycle state and the head of the chain.
CREATE VIEW case_status AS
SELECT
    ci.case_id AS case_id,
    ci.package_id AS package_id,
    (SELECT state FROM lifecycle ORDER BY seq DESC LIMIT 1) AS state,
    (SELECT COALESCE(MAX(revision), 0) FROM revisions) AS analysis_revision,
    (SELECT MAX(seq) FROM events) AS package_generation,
    (SELECT sha256 FROM events ORDER BY seq DESC LIMIT 1) AS head_sha256
FROM case_identity AS ci;

-- One row per (revision, hypothesis_id, action_id).
CREATE VIEW actions AS
SELECT
    r.revision AS revision,
    r.hypothesis_id AS hypothesis_id,
    r.action_id AS action_id,
    r.action AS action,
    r.cost_units AS cost_units,
    CASE
        WHEN c.outcome IS NOT NULL THEN c.outcome
        WHEN res.action_id IS NOT NULL THEN 'awaiting_assessment'
        ELSE 'reserved'
    END AS status,
    res.novelty_score AS novelty_score,
    c.semantic_score AS semantic_score,
    c.information_score AS information_score,
    c.reward_units AS reward_units
FROM reservations AS r
LEFT JOIN results AS res
    ON res.revision = r.revision AND res.hypothesis_id = r.hypothesis_id AND res.action_id = r.action_id
LEFT JOIN closings AS c
    ON c.revision = r.revision AND c.hypothesis_id = r.hypothesis_id AND c.action_id = r.action_id;

-- One row per (revision, hypothesis_id), read from the newest budget event of each
-- revision (which carries every account's state), so the cost does not grow with history.
CREATE VIEW balances AS
SELECT
    r.revision AS revision,
    json_extract(a.value, '$.hypothesis_id') AS hypothesis_id,
    json_extract(a.value, '$.initial_units') AS initial_units,
    json_extract(a.value, '$.granted_units') AS granted_units,
    json_extract(a.value, '$.spent_units') AS spent_units,
    json_extract(a.value, '$.rewarded_units') AS rewarded_units,
    json_extract(a.value, '$.initial_units') + json_extract(a.value, '$.granted_units')
        - json_extract(a.value, '$.spent_units') + json_extract(a.value, '$.rewarded_units') AS remaining_units,
    json_extract(a.value, '$.status') AS status,
    json_extract(a.value, '$.terminal_reason') AS terminal_reason,
    json_extract(a.value, '$.pending_action_id') AS pending_action_id,
    json_extract(a.value, '$.low_information_streak') AS low_information_streak,
    json_extract(a.value, '$.settled_actions') AS settled_actions,
    json_extract(a.value, '$.failed_actions') AS failed_actions
FROM revisions AS r
JOIN events AS e ON e.seq = (
    SELECT seq FROM events WHERE stream = 'budget' AND revision = r.revision
    ORDER BY stream_seq DESC LIMIT 1)
JOIN json_each(e.body, '$.accounts') AS a;

-- The same columns re-derived from the helper rows (reservations, closings, grants,
-- terminations): an audit view whose cost grows with history. `ledger verify` checks
-- that it, `balances` and the replay of the requests all agree.
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
                SELECT MAX(c2.seq) FROM closings AS c2, policies AS p
                 WHERE c2.revision = a.revision AND c2.hypothesis_id = a.hypothesis_id
                   AND p.revision = a.revision AND c2.outcome = 'settled'
                   AND c2.information_score > json_extract(p.policy, '$.low_information_threshold')
            ), 0)) AS low_information_streak,
        t.status AS terminal_status,
        t.terminal_reason AS terminal_reason
    FROM accounts AS a
    LEFT JOIN terminations AS t
        ON t.revision = a.revision AND t.hypothesis_id = a.hypothesis_id
)
SELECT
    revision,
    hypothesis_id,
    initial_units,
    granted_units,
    spent_units,
    rewarded_units,
    initial_units + granted_units - spent_units + rewarded_units AS remaining_units,
    COALESCE(terminal_status, CASE WHEN reserved_actions > 0 THEN 'investigating' ELSE 'new' END) AS status,
    terminal_reason,
    pending_action_id,
    low_information_streak,
    settled_actions,
    failed_actions
FROM totals;

-- One row per evidence record (docs/evidence.md).
CREATE VIEW evidence AS
SELECT
    record_id, revision, hypothesis_id, action_id, operation_id,
    content_sha256, duplicate_of, novelty_score
FROM evidence_records;
