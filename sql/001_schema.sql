-- case-ledger schema version 1: append-only tables and their guards (docs/architecture.md).
--
-- Every table is append-only: BEFORE UPDATE and BEFORE DELETE raise. BEFORE INSERT
-- triggers check uniqueness themselves because INSERT OR REPLACE deletes the old row
-- without firing DELETE triggers unless recursive_triggers is on; guarding here keeps
-- protection independent of connection settings. Triggers use RAISE(ABORT, ...), never
-- RAISE(ROLLBACK, ...), which would end the caller's transaction.

CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
);

-- The hash chain. body holds the exact canonical JSON bytes that were hashed (UTF-8 text).
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    revision INTEGER NOT NULL,
    stream TEXT NOT NULL CHECK (stream IN ('case', 'budget')),
    stream_seq INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    parent_sha256 TEXT NOT NULL,
    operation_key TEXT,
    request_sha256 TEXT,
    body TEXT NOT NULL
);
-- Plain (not UNIQUE) indexes: the only uniqueness constraint is the seq key, which the
-- insert trigger pins to "last seq + 1", so INSERT OR REPLACE has nothing to replace.
-- operation_key uniqueness is checked by the trigger; sha256 follows from the chain.
CREATE INDEX events_by_operation ON events (operation_key) WHERE operation_key IS NOT NULL;
CREATE INDEX events_by_stream ON events (stream, revision, stream_seq);

-- Content-addressed canonical JSON (evidence payloads). cumulative_bytes is the running
-- total of distinct content, so the docs/errors.md limit is checked without summing history.
CREATE TABLE contents (
    sha256 TEXT PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    size_bytes INTEGER NOT NULL,
    cumulative_bytes INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX contents_by_seq ON contents (seq);

-- Evidence records of the evidence store (docs/evidence.md).
CREATE TABLE evidence_records (
    record_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    content_sha256 TEXT NOT NULL REFERENCES contents (sha256),
    duplicate_of TEXT REFERENCES evidence_records (record_id),
    novelty_score INTEGER NOT NULL,
    body TEXT NOT NULL
);

-- Helper tables: one row per fact an event established, each tied to its event's seq.
CREATE TABLE case_identity (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    case_id TEXT NOT NULL,
    package_id TEXT NOT NULL
);

CREATE TABLE lifecycle (
    seq INTEGER PRIMARY KEY REFERENCES events (seq),
    revision INTEGER NOT NULL,
    from_state TEXT,
    state TEXT NOT NULL
);

CREATE TABLE revisions (
    revision INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    units_per_hypothesis INTEGER NOT NULL,
    max_hypotheses INTEGER NOT NULL,
    hypothesis_batch_sha256 TEXT NOT NULL
);

CREATE TABLE hypotheses (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    statement TEXT NOT NULL,
    allocation_units INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id)
);

CREATE TABLE policies (
    revision INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL REFERENCES events (seq),
    policy_sha256 TEXT NOT NULL,
    policy TEXT NOT NULL
);

CREATE TABLE accounts (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    initial_units INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id)
);

CREATE TABLE grants (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    units INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, grant_id)
);

CREATE TABLE reservations (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    action TEXT NOT NULL,
    cost_units INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, action_id)
);

CREATE TABLE results (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    content_sha256 TEXT NOT NULL REFERENCES contents (sha256),
    novelty_score INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, action_id)
);

CREATE TABLE result_sources (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    path TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    sha256 TEXT NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, action_id, path)
);

-- Closing an action is a row pointing at its reservation; the key makes it happen once.
CREATE TABLE closings (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    outcome TEXT NOT NULL CHECK (outcome IN ('settled', 'failed')),
    semantic_score INTEGER,
    information_score INTEGER,
    reward_units INTEGER NOT NULL,
    PRIMARY KEY (revision, hypothesis_id, action_id)
);
CREATE INDEX closings_by_account ON closings (revision, hypothesis_id, seq);

-- An account becomes terminal at most once.
CREATE TABLE terminations (
    revision INTEGER NOT NULL,
    hypothesis_id TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES events (seq),
    status TEXT NOT NULL CHECK (status IN ('budget_exhausted', 'abandoned_low_information_gain', 'rejected')),
    terminal_reason TEXT NOT NULL,
    PRIMARY KEY (revision, hypothesis_id)
);

-- events: seq continuity and parent hash, so no edit, reorder or fork from raw SQL.
CREATE TRIGGER events_insert_chain BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'append-only: the first event must have seq 1 and a zero parent')
    WHERE NOT EXISTS (SELECT 1 FROM events)
      AND (NEW.seq IS NOT 1
           OR NEW.parent_sha256 IS NOT '0000000000000000000000000000000000000000000000000000000000000000');
    SELECT RAISE(ABORT, 'append-only: events.seq must be the last seq + 1 and parent_sha256 its sha256')
    FROM (SELECT seq, sha256 FROM events ORDER BY seq DESC LIMIT 1) AS last
    WHERE NEW.seq IS NOT last.seq + 1 OR NEW.parent_sha256 IS NOT last.sha256;
    SELECT RAISE(ABORT, 'append-only: duplicate events.operation_key')
    WHERE NEW.operation_key IS NOT NULL
      AND EXISTS (SELECT 1 FROM events WHERE operation_key = NEW.operation_key);
END;

-- Every table: no UPDATE, no DELETE.
CREATE TRIGGER schema_migrations_no_update BEFORE UPDATE ON schema_migrations
BEGIN
    SELECT RAISE(ABORT, 'append-only: schema_migrations rows cannot be updated');
END;
CREATE TRIGGER schema_migrations_no_delete BEFORE DELETE ON schema_migrations
BEGIN
    SELECT RAISE(ABORT, 'append-only: schema_migrations rows cannot be deleted');
END;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'append-only: events rows cannot be updated');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'append-only: events rows cannot be deleted');
END;
CREATE TRIGGER contents_no_update BEFORE UPDATE ON contents
BEGIN
    SELECT RAISE(ABORT, 'append-only: contents rows cannot be updated');
END;
CREATE TRIGGER contents_no_delete BEFORE DELETE ON contents
BEGIN
    SELECT RAISE(ABORT, 'append-only: contents rows cannot be deleted');
END;
CREATE TRIGGER evidence_records_no_update BEFORE UPDATE ON evidence_records
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_records rows cannot be updated');
END;
CREATE TRIGGER evidence_records_no_delete BEFORE DELETE ON evidence_records
BEGIN
    SELECT RAISE(ABORT, 'append-only: evidence_records rows cannot be deleted');
END;
CREATE TRIGGER case_identity_no_update BEFORE UPDATE ON case_identity
BEGIN
    SELECT RAISE(ABORT, 'append-only: case_identity rows cannot be updated');
END;
CREATE TRIGGER case_identity_no_delete BEFORE DELETE ON case_identity
BEGIN
    SELECT RAISE(ABORT, 'append-only: case_identity rows cannot be deleted');
END;
CREATE TRIGGER lifecycle_no_update BEFORE UPDATE ON lifecycle
BEGIN
    SELECT RAISE(ABORT, 'append-only: lifecycle rows cannot be updated');
END;
CREATE TRIGGER lifecycle_no_delete BEFORE DELETE ON lifecycle
BEGIN
    SELECT RAISE(ABORT, 'append-only: lifecycle rows cannot be deleted');
END;
CREATE TRIGGER revisions_no_update BEFORE UPDATE ON revisions
BEGIN
    SELECT RAISE(ABORT, 'append-only: revisions rows cannot be updated');
END;
CREATE TRIGGER revisions_no_delete BEFORE DELETE ON revisions
BEGIN
    SELECT RAISE(ABORT, 'append-only: revisions rows cannot be deleted');
END;
CREATE TRIGGER hypotheses_no_update BEFORE UPDATE ON hypotheses
BEGIN
    SELECT RAISE(ABORT, 'append-only: hypotheses rows cannot be updated');
END;
CREATE TRIGGER hypotheses_no_delete BEFORE DELETE ON hypotheses
BEGIN
    SELECT RAISE(ABORT, 'append-only: hypotheses rows cannot be deleted');
END;
CREATE TRIGGER policies_no_update BEFORE UPDATE ON policies
BEGIN
    SELECT RAISE(ABORT, 'append-only: policies rows cannot be updated');
END;
CREATE TRIGGER policies_no_delete BEFORE DELETE ON policies
BEGIN
    SELECT RAISE(ABORT, 'append-only: policies rows cannot be deleted');
END;
CREATE TRIGGER accounts_no_update BEFORE UPDATE ON accounts
BEGIN
    SELECT RAISE(ABORT, 'append-only: accounts rows cannot be updated');
END;
CREATE TRIGGER accounts_no_delete BEFORE DELETE ON accounts
BEGIN
    SELECT RAISE(ABORT, 'append-only: accounts rows cannot be deleted');
END;
CREATE TRIGGER grants_no_update BEFORE UPDATE ON grants
BEGIN
    SELECT RAISE(ABORT, 'append-only: grants rows cannot be updated');
END;
CREATE TRIGGER grants_no_delete BEFORE DELETE ON grants
BEGIN
    SELECT RAISE(ABORT, 'append-only: grants rows cannot be deleted');
END;
CREATE TRIGGER reservations_no_update BEFORE UPDATE ON reservations
BEGIN
    SELECT RAISE(ABORT, 'append-only: reservations rows cannot be updated');
END;
CREATE TRIGGER reservations_no_delete BEFORE DELETE ON reservations
BEGIN
    SELECT RAISE(ABORT, 'append-only: reservations rows cannot be deleted');
END;
CREATE TRIGGER results_no_update BEFORE UPDATE ON results
BEGIN
    SELECT RAISE(ABORT, 'append-only: results rows cannot be updated');
END;
CREATE TRIGGER results_no_delete BEFORE DELETE ON results
BEGIN
    SELECT RAISE(ABORT, 'append-only: results rows cannot be deleted');
END;
CREATE TRIGGER result_sources_no_update BEFORE UPDATE ON result_sources
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_sources rows cannot be updated');
END;
CREATE TRIGGER result_sources_no_delete BEFORE DELETE ON result_sources
BEGIN
    SELECT RAISE(ABORT, 'append-only: result_sources rows cannot be deleted');
END;
CREATE TRIGGER closings_no_update BEFORE UPDATE ON closings
BEGIN
    SELECT RAISE(ABORT, 'append-only: closings rows cannot be updated');
END;
CREATE TRIGGER closings_no_delete BEFORE DELETE ON closings
BEGIN
    SELECT RAISE(ABORT, 'append-only: closings rows cannot be deleted');
END;
CREATE TRIGGER terminations_no_update BEFORE UPDATE ON terminations
BEGIN
    SELECT RAISE(ABORT, 'append-only: terminations rows cannot be updated');
END;
CREATE TRIGGER terminations_no_delete BEFORE DELETE ON terminations
BEGIN
    SELECT RAISE(ABORT, 'append-only: terminations rows cannot be deleted');
END;

-- Helper rows: the key must be new and the row must belong to the newest event.
CREATE TRIGGER contents_insert_guard BEFORE INSERT ON contents
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate contents key')
    WHERE EXISTS (SELECT 1 FROM contents WHERE sha256 = NEW.sha256);
    SELECT RAISE(ABORT, 'append-only: contents rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER evidence_records_insert_guard BEFORE INSERT ON evidence_records
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate evidence_records key')
    WHERE EXISTS (SELECT 1 FROM evidence_records WHERE record_id = NEW.record_id);
    SELECT RAISE(ABORT, 'append-only: evidence_records rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER case_identity_insert_guard BEFORE INSERT ON case_identity
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate case_identity key')
    WHERE EXISTS (SELECT 1 FROM case_identity WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: case_identity rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER lifecycle_insert_guard BEFORE INSERT ON lifecycle
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate lifecycle key')
    WHERE EXISTS (SELECT 1 FROM lifecycle WHERE seq = NEW.seq);
    SELECT RAISE(ABORT, 'append-only: lifecycle rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER revisions_insert_guard BEFORE INSERT ON revisions
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate revisions key')
    WHERE EXISTS (SELECT 1 FROM revisions WHERE revision = NEW.revision);
    SELECT RAISE(ABORT, 'append-only: revisions rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER hypotheses_insert_guard BEFORE INSERT ON hypotheses
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate hypotheses key')
    WHERE EXISTS (SELECT 1 FROM hypotheses WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id);
    SELECT RAISE(ABORT, 'append-only: hypotheses rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER policies_insert_guard BEFORE INSERT ON policies
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate policies key')
    WHERE EXISTS (SELECT 1 FROM policies WHERE revision = NEW.revision);
    SELECT RAISE(ABORT, 'append-only: policies rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER accounts_insert_guard BEFORE INSERT ON accounts
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate accounts key')
    WHERE EXISTS (SELECT 1 FROM accounts WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id);
    SELECT RAISE(ABORT, 'append-only: accounts rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER grants_insert_guard BEFORE INSERT ON grants
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate grants key')
    WHERE EXISTS (SELECT 1 FROM grants WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id AND grant_id = NEW.grant_id);
    SELECT RAISE(ABORT, 'append-only: grants rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER reservations_insert_guard BEFORE INSERT ON reservations
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate reservations key')
    WHERE EXISTS (SELECT 1 FROM reservations WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id AND action_id = NEW.action_id);
    SELECT RAISE(ABORT, 'append-only: reservations rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER results_insert_guard BEFORE INSERT ON results
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate results key')
    WHERE EXISTS (SELECT 1 FROM results WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id AND action_id = NEW.action_id);
    SELECT RAISE(ABORT, 'append-only: results rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER result_sources_insert_guard BEFORE INSERT ON result_sources
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate result_sources key')
    WHERE EXISTS (SELECT 1 FROM result_sources WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id AND action_id = NEW.action_id AND path = NEW.path);
    SELECT RAISE(ABORT, 'append-only: result_sources rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER closings_insert_guard BEFORE INSERT ON closings
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate closings key')
    WHERE EXISTS (SELECT 1 FROM closings WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id AND action_id = NEW.action_id);
    SELECT RAISE(ABORT, 'append-only: closings rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER terminations_insert_guard BEFORE INSERT ON terminations
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate terminations key')
    WHERE EXISTS (SELECT 1 FROM terminations WHERE revision = NEW.revision AND hypothesis_id = NEW.hypothesis_id);
    SELECT RAISE(ABORT, 'append-only: terminations rows must belong to the newest event')
    WHERE NEW.seq IS NOT (SELECT MAX(seq) FROM events);
END;
CREATE TRIGGER schema_migrations_insert_guard BEFORE INSERT ON schema_migrations
BEGIN
    SELECT RAISE(ABORT, 'append-only: duplicate schema_migrations version')
    WHERE EXISTS (SELECT 1 FROM schema_migrations WHERE version = NEW.version);
END;
