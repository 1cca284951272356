-- The evidence store (tool results as records, atoms, cumulative indexes).
-- evidence_records (001) holds one row per record; these tables hold the rest.

-- One row per distinct atom (a located item: a source line or a database row), first seen
-- in the record named here. Novelty v2 counts the atoms of a result not yet in this table.
CREATE TABLE evidence_atoms (
    atom_sha256 TEXT PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    record_id TEXT NOT NULL
);

-- One row per published index: its hash (the next index's parent) and the next record number.
CREATE TABLE evidence_indexes (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    index_sha256 TEXT NOT NULL,
    next_record_number INTEGER NOT NULL,
    record_count INTEGER NOT NULL
);

-- Where each evidence event exports to (analysis/evidence/<revision>/<op>/<file>). Evidence events are
-- stored in the 'case' stream with stream_seq 0: they are not numbered among the case events.
CREATE TABLE evidence_files (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    path TEXT NOT NULL
);

CREATE INDEX evidence_records_by_operation ON evidence_records (operation_id);
CREATE INDEX evidence_records_by_action ON evidence_records (revision, hypothesis_id, action_id);
CREATE INDEX evidence_records_by_content ON evidence_records (content_sha256, record_id);

CREATE TRIGGER evidence_atoms_no_update BEFORE UPDATE ON evidence_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_atoms rows cannot be updated');
END;
CREATE TRIGGER evidence_atoms_no_delete BEFORE DELETE ON evidence_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_atoms rows cannot be deleted');
END;
CREATE TRIGGER evidence_indexes_no_update BEFORE UPDATE ON evidence_indexes
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_indexes rows cannot be updated');
END;
CREATE TRIGGER evidence_indexes_no_delete BEFORE DELETE ON evidence_indexes
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_indexes rows cannot be deleted');
END;
CREATE TRIGGER evidence_files_no_update BEFORE UPDATE ON evidence_files
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_files rows cannot be updated');
END;
CREATE TRIGGER evidence_files_no_delete BEFORE DELETE ON evidence_files
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_files rows cannot be deleted');
END;
CREATE TRIGGER evidence_files_insert_guard BEFORE INSERT ON evidence_files
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate evidence_files key')
    WHERE EXISTS (SELECT 1 FROM evidence_files WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: evidence_files rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER evidence_atoms_insert_guard BEFORE INSERT ON evidence_atoms
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate evidence_atoms key')
    WHERE EXISTS (SELECT 1 FROM evidence_atoms WHERE atom_sha256 = NEW.atom_sha256);
    SELECT RAISE(ABORT, 'append-only: evidence_atoms rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER evidence_indexes_insert_guard BEFORE INSERT ON evidence_indexes
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate evidence_indexes key')
    WHERE EXISTS (SELECT 1 FROM evidence_indexes WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: evidence_indexes rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;

-- Asynchronous tests and feedback. A requested test is a reservation (in reservations, with
-- the action test.human or test.automated) bound to its operation id here.
CREATE TABLE test_requests (
    operation_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('human', 'automated'))
);

-- One row per submitted draft (F000001, …); its reply and attachment hashes are in the event body.
CREATE TABLE feedback_drafts (
    feedback_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    operation_id TEXT NOT NULL,
    submission_sha256 TEXT NOT NULL
);

-- One row per confirmed draft.
CREATE TABLE feedback_confirmations (
    feedback_id TEXT PRIMARY KEY REFERENCES feedback_drafts (feedback_id),
    seq INTEGER NOT NULL REFERENCES events (seq)
);

CREATE TRIGGER test_requests_no_update BEFORE UPDATE ON test_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: test_requests rows cannot be updated');
END;
CREATE TRIGGER test_requests_no_delete BEFORE DELETE ON test_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: test_requests rows cannot be deleted');
END;
CREATE TRIGGER test_requests_insert_guard BEFORE INSERT ON test_requests
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate test_requests key')
    WHERE EXISTS (SELECT 1 FROM test_requests WHERE operation_id = NEW.operation_id);
    SELECT RAISE(ABORT, 'append-only: test_requests rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER feedback_drafts_no_update BEFORE UPDATE ON feedback_drafts
BEGIN
    SELECT RAISE(ABORT, 'append-only: feedback_drafts rows cannot be updated');
END;
CREATE TRIGGER feedback_drafts_no_delete BEFORE DELETE ON feedback_drafts
BEGIN
    SELECT RAISE(ABORT, 'append-only: feedback_drafts rows cannot be deleted');
END;
CREATE TRIGGER feedback_drafts_insert_guard BEFORE INSERT ON feedback_drafts
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate feedback_drafts key')
    WHERE EXISTS (SELECT 1 FROM feedback_drafts WHERE feedback_id = NEW.feedback_id);
    SELECT RAISE(ABORT, 'append-only: feedback_drafts rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER feedback_confirmations_no_update BEFORE UPDATE ON feedback_confirmations
BEGIN
    SELECT RAISE(ABORT, 'append-only: feedback_confirmations rows cannot be updated');
END;
CREATE TRIGGER feedback_confirmations_no_delete BEFORE DELETE ON feedback_confirmations
BEGIN
    SELECT RAISE(ABORT, 'append-only: feedback_confirmations rows cannot be deleted');
END;
CREATE TRIGGER feedback_confirmations_insert_guard BEFORE INSERT ON feedback_confirmations
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate feedback_confirmations key')
    WHERE EXISTS (SELECT 1 FROM feedback_confirmations WHERE feedback_id = NEW.feedback_id);
    SELECT RAISE(ABORT, 'append-only: feedback_confirmations rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
