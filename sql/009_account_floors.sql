-- Running state the agent's reads need in one indexed lookup, whatever the length of the history.
--
-- The soft gate's scarcity reads each account's lowest pct_remaining since its last grant
-- (docs/scopes.md). This table keeps that floor as it moves, so the read is one indexed lookup
-- whatever the length of the history: a row when a budget event moves an account's floor,
-- i.e. when floor(100 * remaining / (initial + granted)) drops below it, or a grant of that
-- account resets it to the account's pct at the grant. The newest row of an account is its floor.
CREATE TABLE account_floors (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    lowest_pct INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, seq)
);

-- The floors of the budget events already in the ledger, computed the way each new event adds them.
INSERT INTO account_floors (revision, hypothesis_id, seq, lowest_pct)
WITH states AS (
    SELECT e.seq, e.revision, json_extract(a.value, '$.hypothesis_id') AS hypothesis_id,
           (json_extract(a.value, '$.remaining_units') * 100)
           / (json_extract(a.value, '$.initial_units') + json_extract(a.value, '$.granted_units')) AS pct,
           (e.type = 'budget.granted'
            AND json_extract(e.body, '$.grant.hypothesis_id') = json_extract(a.value, '$.hypothesis_id')) AS granted
    FROM events AS e, json_each(e.body, '$.accounts') AS a
    WHERE e.stream = 'budget'
),
periods AS (
    SELECT *, SUM(granted) OVER (PARTITION BY revision, hypothesis_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS period
    FROM states
),
floors AS (
    SELECT *, MIN(pct) OVER (PARTITION BY revision, hypothesis_id, period ORDER BY seq
                             ROWS UNBOUNDED PRECEDING) AS lowest_pct
    FROM periods
),
moves AS (
    SELECT *, LAG(lowest_pct) OVER (PARTITION BY revision, hypothesis_id ORDER BY seq) AS previous
    FROM floors
)
SELECT revision, hypothesis_id, seq, lowest_pct FROM moves
WHERE previous IS NULL OR previous <> lowest_pct;

-- Money reported with results (result_costs), as running totals of its account, its revision and
-- the case after each report: a cost_usd_millicents limit reads one row whatever the history.
CREATE TABLE money_totals (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    hypothesis_total INTEGER NOT NULL,
    revision_total INTEGER NOT NULL,
    case_total INTEGER NOT NULL
);
CREATE INDEX money_totals_by_account ON money_totals (revision, hypothesis_id, seq);
CREATE INDEX money_totals_by_revision ON money_totals (revision, seq);

INSERT INTO money_totals (seq, revision, hypothesis_id, hypothesis_total, revision_total, case_total)
SELECT seq, revision, hypothesis_id,
       SUM(cost_usd_millicents) OVER (PARTITION BY revision, hypothesis_id ORDER BY seq),
       SUM(cost_usd_millicents) OVER (PARTITION BY revision ORDER BY seq),
       SUM(cost_usd_millicents) OVER (ORDER BY seq)
FROM result_costs;

CREATE TRIGGER money_totals_no_update BEFORE UPDATE ON money_totals
BEGIN
    SELECT RAISE(ABORT, 'append-only: money_totals rows cannot be updated');
END;
CREATE TRIGGER money_totals_no_delete BEFORE DELETE ON money_totals
BEGIN
    SELECT RAISE(ABORT, 'append-only: money_totals rows cannot be deleted');
END;
CREATE TRIGGER money_totals_insert_guard BEFORE INSERT ON money_totals
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate money_totals key')
    WHERE EXISTS (SELECT 1 FROM money_totals WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: money_totals rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER account_floors_no_update BEFORE UPDATE ON account_floors
BEGIN
    SELECT RAISE(ABORT, 'append-only: account_floors rows cannot be updated');
END;
CREATE TRIGGER account_floors_no_delete BEFORE DELETE ON account_floors
BEGIN
    SELECT RAISE(ABORT, 'append-only: account_floors rows cannot be deleted');
END;
CREATE TRIGGER account_floors_insert_guard BEFORE INSERT ON account_floors
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate account_floors key')
    WHERE EXISTS (SELECT 1 FROM account_floors WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id
                  AND seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: account_floors rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
