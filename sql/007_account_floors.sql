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
