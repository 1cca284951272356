-- The questions `ledger serve` offers on every case (Datasette's canned queries, docs/browse.md).
-- Each block is headed `-- name: <name>`; its title and description are in descriptions.toml.
-- Every one is a read; a `:name` is a parameter Datasette asks for (empty means "all").

-- name: spend_by_action_type
SELECT action, COUNT(*) AS actions, SUM(cost_units) AS spent, SUM(reward_units) AS refunded
FROM actions GROUP BY action ORDER BY spent DESC

-- name: refunds_per_hypothesis
SELECT b.revision, b.hypothesis_id, b.statement, COALESCE(SUM(a.reward_units), 0) AS refunded
FROM balances AS b LEFT JOIN actions AS a USING (revision, hypothesis_id)
GROUP BY b.revision, b.hypothesis_id, b.statement ORDER BY refunded DESC

-- name: last_ten_events
SELECT seq, type, created_at, body ->> '$.request.reason' AS reason
FROM events ORDER BY seq DESC LIMIT 10

-- name: abandoned_hypotheses
SELECT revision, hypothesis_id, statement, status, terminal_reason
FROM balances WHERE status IN ('abandoned_low_information_gain', 'budget_exhausted', 'rejected')

-- name: pending_actions
SELECT revision, hypothesis_id, action_id, action, status, reserved_at
FROM actions WHERE status IN ('reserved', 'awaiting_assessment') ORDER BY reserved_at

-- name: refusals_and_reasons
SELECT e.seq AS seq, e.created_at AS created_at, e.type AS type, e.revision AS revision,
    CAST(e.body ->> '$.hypothesis_id' AS TEXT) AS hypothesis_id,
    CAST(e.body ->> '$.action_id' AS TEXT) AS action_id,
    'reserving would take ' || x.dimension || ' of scope ' || x.scope || ' to ' || x.consumed_after
        || ', over its limit of ' || x.declared || ' (on_exhausted: ' || x.on_exhausted || ')' AS reason
FROM limit_exceedances AS x JOIN events AS e ON e.seq = x.seq
WHERE :hypothesis_id = '' OR e.body ->> '$.hypothesis_id' = :hypothesis_id
UNION ALL
SELECT e.seq, e.created_at, e.type, t.revision, t.hypothesis_id,
    CAST(e.body ->> '$.request.action_id' AS TEXT),
    t.status || ': ' || t.terminal_reason
FROM terminations AS t JOIN events AS e ON e.seq = t.seq
WHERE :hypothesis_id = '' OR t.hypothesis_id = :hypothesis_id
ORDER BY seq

-- name: evidence_by_novelty
SELECT record_id, hypothesis_id, action_id, novelty_score, duplicate_of, content_sha256
FROM evidence
WHERE :hypothesis_id = '' OR hypothesis_id = :hypothesis_id
ORDER BY novelty_score DESC, record_id

-- name: scope_usage_near_limit
SELECT scope_type, scope_id, dimension, declared, consumed, remaining, warning_bps,
    CASE WHEN declared > 0 THEN consumed * 10000 / declared ELSE 10000 END AS used_bps, on_exhausted
FROM scope_usage
WHERE consumed * 10000 >= declared * warning_bps
ORDER BY remaining, scope_type, scope_id, dimension

-- name: remaining_units_history
-- from the helper rows (as balances_recomputed): the account's initial units, then every grant,
-- reservation (its cost) and closing (its refund) as a running sum; no JSON is parsed
WITH moves AS (
    SELECT revision, hypothesis_id, seq, initial_units AS delta FROM accounts
    UNION ALL SELECT revision, hypothesis_id, seq, units FROM grants
    UNION ALL SELECT revision, hypothesis_id, seq, -cost_units FROM reservations
    UNION ALL SELECT revision, hypothesis_id, seq, reward_units FROM closings WHERE reward_units <> 0
),
running AS (
    SELECT seq, revision, hypothesis_id,
        SUM(delta) OVER (PARTITION BY revision, hypothesis_id ORDER BY seq) AS remaining_units
    FROM moves
    WHERE :hypothesis_id = '' OR hypothesis_id = :hypothesis_id
)
SELECT DISTINCT r.seq AS seq, e.created_at AS created_at, e.type AS type, r.revision AS revision,
    r.hypothesis_id AS hypothesis_id, CAST(r.remaining_units AS INTEGER) AS remaining_units
FROM running AS r JOIN events AS e ON e.seq = r.seq
ORDER BY seq, revision, hypothesis_id
