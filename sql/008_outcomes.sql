-- Outcomes of revisions and the atoms of budget results (docs/runs.md, docs/concepts.md).
-- Older ledgers get these tables and the new case_status columns when opened by a writer: outcomes
-- empty (no earlier event records one), result_atoms with the atoms of every result stored before,
-- as the replay derives them; no other row is touched.

-- One row per recorded outcome: how the revision's work ended and where the verdict came from.
CREATE TABLE outcomes (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    revision INTEGER NOT NULL UNIQUE,
    outcome TEXT NOT NULL,
    source TEXT NOT NULL
);

-- The atom ids of each new evidence content a record_result stored (its "atoms" list); novelty
-- over atoms (novelty_mode = "atoms") counts the atoms of a result not yet in this table.
CREATE TABLE result_atoms (
    atom_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    PRIMARY KEY (atom_id, seq)
) WITHOUT ROWID;

-- An older ledger's results carried atoms lists too (evidence is the caller's JSON): each content a
-- record_result stored first (contents.seq is its seq) whose "atoms" is a list of strings gives its
-- distinct atoms, as a record_result does now. Each list is read once (MATERIALIZED). SQLite's json_each
-- ends a text at a \u0000: a list holding one is read through ledger_atoms_marked, a function the
-- ledger gives its connection, which writes each NUL as a marker the list does not hold, put back here.
-- Before the guards below, which admit the newest event's rows only.
WITH lists AS MATERIALIZED (
    SELECT r.seq AS seq,
           CASE WHEN json_valid(c.body) AND json_type(c.body, '$.atoms') = 'array' THEN c.body -> '$.atoms' END AS atoms
    FROM results AS r
    JOIN contents AS c ON c.sha256 = r.content_sha256 AND c.seq = r.seq
), texts AS MATERIALIZED (
    SELECT seq, atoms, instr(atoms, '\u0000') > 0 AS with_nul
    FROM lists
    WHERE atoms IS NOT NULL AND NOT EXISTS (SELECT 1 FROM json_each(lists.atoms) AS b WHERE b.type IS NOT 'text')
), converted AS MATERIALIZED (
    SELECT seq, ledger_atoms_marked(atoms) AS converted FROM texts WHERE with_nul
), marked AS MATERIALIZED (
    SELECT seq, converted ->> '$.marker' AS marker, converted -> '$.atoms' AS atoms FROM converted
)
INSERT INTO result_atoms (atom_id, seq)
SELECT a.value, t.seq FROM texts AS t, json_each(t.atoms) AS a WHERE NOT t.with_nul
UNION
SELECT replace(a.value, m.marker, char(0)), m.seq FROM marked AS m, json_each(m.atoms) AS a;

CREATE TRIGGER outcomes_no_update BEFORE UPDATE ON outcomes
BEGIN
    SELECT RAISE(ABORT, 'append-only: outcomes rows cannot be updated');
END;
CREATE TRIGGER outcomes_no_delete BEFORE DELETE ON outcomes
BEGIN
    SELECT RAISE(ABORT, 'append-only: outcomes rows cannot be deleted');
END;
CREATE TRIGGER outcomes_insert_guard BEFORE INSERT ON outcomes
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate outcomes key')
    WHERE EXISTS (SELECT 1 FROM outcomes WHERE seq = NEW.seq OR revision = NEW.revision);
    SELECT RAISE(ABORT, 'append-only: outcomes rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER result_atoms_no_update BEFORE UPDATE ON result_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_atoms rows cannot be updated');
END;
CREATE TRIGGER result_atoms_no_delete BEFORE DELETE ON result_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_atoms rows cannot be deleted');
END;
CREATE TRIGGER result_atoms_insert_guard BEFORE INSERT ON result_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate result_atoms key')
    WHERE EXISTS (SELECT 1 FROM result_atoms WHERE atom_id = NEW.atom_id AND seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: result_atoms rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;

DROP VIEW case_status;

-- One row: the case, its lifecycle state, the head of the chain and the current revision's outcome.
CREATE VIEW case_status AS
SELECT
    ci.case_id AS case_id,
    ci.package_id AS package_id,
    CAST((SELECT state FROM lifecycle ORDER BY seq DESC LIMIT 1) AS TEXT) AS state,
    CAST((SELECT COALESCE(MAX(revision), 0) FROM revisions) AS BIGINT) AS analysis_revision,
    CAST((SELECT MAX(seq) FROM events) AS BIGINT) AS package_generation,
    CAST((SELECT sha256 FROM events ORDER BY seq DESC LIMIT 1) AS TEXT) AS head_sha256,
    CAST((SELECT o.outcome FROM outcomes AS o
          WHERE o.revision = (SELECT COALESCE(MAX(revision), 0) FROM revisions)) AS TEXT) AS outcome,
    CAST((SELECT o.source FROM outcomes AS o
          WHERE o.revision = (SELECT COALESCE(MAX(revision), 0) FROM revisions)) AS TEXT) AS outcome_source
FROM case_identity AS ci;
