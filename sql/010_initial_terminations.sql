-- Accounts that initialize opened already ended (an allocation below the affordability floor) get
-- their terminations row, as every other account a budget event ends: before this version the
-- account showed budget_exhausted in balances but had no row, so balances_recomputed showed it new.
-- Older ledgers get the rows of their initialize events when opened by a writer; nothing else moves.
-- The guard admits rows of the newest event only: it is set aside for these and put back unchanged
-- (main.: verify's unguarded scratch ledger has none, and must not reach the one it reads).
DROP TRIGGER IF EXISTS main.terminations_insert_guard;

INSERT INTO terminations (revision, hypothesis_id, seq, status, terminal_reason)
SELECT e.revision, a.value ->> '$.hypothesis_id', e.seq, a.value ->> '$.status', a.value ->> '$.terminal_reason'
FROM events AS e, json_each(e.body, '$.accounts') AS a
WHERE e.type = 'budget.initialized'
  AND a.value ->> '$.status' IN ('budget_exhausted', 'abandoned_low_information_gain', 'rejected')
  AND NOT EXISTS (SELECT 1 FROM terminations AS t
                  WHERE t.revision = e.revision AND t.hypothesis_id = a.value ->> '$.hypothesis_id');

CREATE TRIGGER terminations_insert_guard BEFORE INSERT ON terminations
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate terminations key')
    WHERE EXISTS (SELECT 1 FROM terminations WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id);
    SELECT RAISE(ABORT, 'append-only: terminations rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
