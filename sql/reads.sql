-- Named read statements of the read side: snapshot, view reads, export and verify.
-- Each block starts with "-- name: <name>". Placeholders in braces ({schema},
-- {table}, {order}, {columns}) are identifiers the code fills in (main or orig
-- for the attached copy verify reads); values always bind as parameters.

-- name: case_status_row
SELECT * FROM case_status;

-- name: balances_in_order
SELECT * FROM balances ORDER BY revision, CAST(substr(hypothesis_id, 2) AS INTEGER);

-- name: balances_of_revision
SELECT * FROM balances WHERE revision = :revision;

-- name: actions_in_reservation_order
SELECT a.* FROM actions AS a JOIN reservations AS r USING (revision, hypothesis_id, action_id)
ORDER BY r.seq;

-- name: budget_chain_after
-- snapshot, incrementally: the budget events of a revision after a given stream_seq
SELECT e.seq, e.sha256, e.body, p.sha256, e.stream_seq FROM events AS e
LEFT JOIN events AS p ON p.seq = e.seq - 1
WHERE e.stream = 'budget' AND e.revision = :revision AND e.stream_seq > :after ORDER BY e.stream_seq;

-- name: event_hash_and_body
SELECT sha256, body FROM events WHERE seq = :seq;

-- name: schema_cookie
-- changes whenever the schema does (a dropped append-only guard among others)
PRAGMA schema_version;

-- name: feedback_draft_of_operation
-- store_feedback without a feedback id: the draft stored already (a record whose origin names it; a
-- case an older build made may hold later drafts), else the operation's newest confirmed draft, else
-- its newest draft
SELECT d.feedback_id FROM feedback_drafts AS d WHERE d.operation_id = :operation_id
ORDER BY EXISTS (SELECT 1 FROM evidence_records AS e WHERE e.operation_id = d.operation_id
                 AND e.body ->> '$.origin.feedback_id' = d.feedback_id) DESC,
         EXISTS (SELECT 1 FROM feedback_confirmations AS c WHERE c.feedback_id = d.feedback_id) DESC, d.seq DESC
LIMIT 1;

-- name: event_count
SELECT COUNT(*) FROM {schema}.events;

-- name: content_count
SELECT COUNT(*) FROM {schema}.contents;

-- name: event_addresses
SELECT COALESCE(f.path, e.stream), e.revision, e.stream_seq FROM {schema}.events AS e
LEFT JOIN {schema}.evidence_files AS f ON f.seq = e.seq;

-- name: content_shas
SELECT sha256 FROM {schema}.contents;

-- name: last_revision
-- the highest revision the history opened (0 before the first)
SELECT COALESCE(MAX(revision), 0) FROM {schema}.revisions;

-- name: head_address
-- where the ledger's last event is exported
SELECT COALESCE(f.path, e.stream), e.revision, e.stream_seq FROM {schema}.events AS e
LEFT JOIN {schema}.evidence_files AS f ON f.seq = e.seq ORDER BY e.seq DESC LIMIT 1;

-- name: event_addresses_after
-- what a case's kept set of exported paths lacks: the events after the seq it was read at
SELECT COALESCE(f.path, e.stream), e.revision, e.stream_seq FROM {schema}.events AS e
LEFT JOIN {schema}.evidence_files AS f ON f.seq = e.seq WHERE e.seq > :after;

-- name: content_shas_after
SELECT sha256 FROM {schema}.contents WHERE seq > :after;

-- name: events_for_export
SELECT e.seq, COALESCE(f.path, e.stream), e.revision, e.stream_seq, e.body FROM {schema}.events AS e
LEFT JOIN {schema}.evidence_files AS f ON f.seq = e.seq ORDER BY e.seq;

-- name: events_to_export
SELECT e.seq, COALESCE(f.path, e.stream), e.revision, e.stream_seq, e.body, e.sha256, e.parent_sha256
FROM events AS e LEFT JOIN evidence_files AS f ON f.seq = e.seq ORDER BY e.seq;

-- name: contents_for_export
SELECT sha256, seq, body FROM {schema}.contents ORDER BY seq, sha256;

-- name: content_body
SELECT body FROM {schema}.contents WHERE sha256 = :sha256;

-- name: events_for_verify
SELECT {columns} FROM {schema}.events ORDER BY seq;

-- name: events_in_range
-- verify: the stored events with after < seq <= last, what the replay reads of each
SELECT seq, sha256, body FROM {schema}.events WHERE seq > :after AND seq <= :last ORDER BY seq;

-- name: events_up_to
-- the same from the first stored event on, whatever its seq
SELECT seq, sha256, body FROM {schema}.events WHERE seq <= :last ORDER BY seq;

-- name: events_to_fast_forward
-- verify's second process: what advances the in-memory view over events it does not replay
-- (seq <= last): each body with its stream (an evidence event's is its export path) and operation key
SELECT e.seq, e.sha256, e.body, COALESCE(f.path, e.stream), e.operation_key, e.request_sha256
FROM {schema}.events AS e LEFT JOIN {schema}.evidence_files AS f ON f.seq = e.seq
WHERE e.seq <= :last ORDER BY e.seq;

-- name: events_to_fast_forward_before_evidence
SELECT seq, sha256, body, stream, operation_key, request_sha256 FROM {schema}.events WHERE seq <= :last ORDER BY seq;

-- name: contents_to_fast_forward
SELECT seq, sha256, body FROM {schema}.contents WHERE seq <= :last ORDER BY seq, rowid;

-- name: rows_differ_in_range
-- verify with two processes: is a row of orig.{table} or main.{table} whose seq lies in the range
-- ((seq > :after) IS TRUE, the later events, or IS NOT TRUE, the earlier) in only one of them, or in
-- both as often but with other storage classes ({types}: typeof() of every column; 10.0 = 10 in SQL),
-- or in one of them more often (EXCEPT compares sets: the counts tell a row stored twice)
SELECT 1 FROM (SELECT *, {types} FROM orig.{table} WHERE (seq > :after) IS {truth}
               EXCEPT SELECT *, {types} FROM main.{table} WHERE (seq > :after) IS {truth})
UNION ALL
SELECT 1 FROM (SELECT *, {types} FROM main.{table} WHERE (seq > :after) IS {truth}
               EXCEPT SELECT *, {types} FROM orig.{table} WHERE (seq > :after) IS {truth})
UNION ALL
SELECT 1 WHERE (SELECT COUNT(*) FROM orig.{table} WHERE (seq > :after) IS {truth})
            IS NOT (SELECT COUNT(*) FROM main.{table} WHERE (seq > :after) IS {truth})
LIMIT 1;

-- name: events_differ_in_range
-- verify with two processes: events_differ, for the events whose seq lies in the range
SELECT 1 FROM orig.events AS o LEFT JOIN main.events AS m ON m.seq = o.seq
WHERE (o.seq > :after) IS {truth} AND (
      m.seq IS NULL OR o.type IS NOT m.type OR o.revision IS NOT m.revision OR o.stream IS NOT m.stream
   OR o.stream_seq IS NOT m.stream_seq OR o.created_at IS NOT m.created_at OR o.sha256 IS NOT m.sha256
   OR o.parent_sha256 IS NOT m.parent_sha256 OR o.operation_key IS NOT m.operation_key
   OR o.request_sha256 IS NOT m.request_sha256 OR o.body IS NOT m.body
   OR typeof(o.revision) IS NOT typeof(m.revision) OR typeof(o.stream_seq) IS NOT typeof(m.stream_seq))
UNION ALL
SELECT 1 FROM main.events AS m LEFT JOIN orig.events AS o ON o.seq = m.seq
WHERE (m.seq > :after) IS {truth} AND o.seq IS NULL
LIMIT 1;

-- name: rows_before_range
-- verify with two processes: a row of the second process's scratch ledger that is not of its events
SELECT 1 FROM part.{table} WHERE (seq > :after) IS NOT TRUE LIMIT 1;

-- name: events_before_range
-- the same for events, whose seq is the rowid (never NULL): a lookup, not a scan
SELECT 1 FROM part.events WHERE seq <= :after LIMIT 1;

-- name: save_view
-- verify with two processes: a public view of the ledger, computed while the second process still
-- replays; columns without a declared type, so every value is kept as the view gives it
CREATE TEMP TABLE verify_orig_{table} ({columns});

-- name: fill_saved_view
INSERT INTO temp.verify_orig_{table} SELECT * FROM orig.{table};

-- name: saved_view_rows_differ
-- view_rows_differ with the ledger's side saved before (save_view)
WITH m AS MATERIALIZED (SELECT * FROM main.{table})
SELECT * FROM (SELECT *, {types} FROM temp.verify_orig_{table} EXCEPT SELECT *, {types} FROM m)
UNION ALL SELECT * FROM (SELECT *, {types} FROM m EXCEPT SELECT *, {types} FROM temp.verify_orig_{table})
ORDER BY {order} LIMIT 1;

-- name: copy_rows
-- verify: the second process's replay of the later events, into the scratch ledger after the first's
INSERT INTO main.{table} SELECT * FROM part.{table};

-- name: newest_event
SELECT seq, sha256 FROM {schema}.events ORDER BY seq DESC LIMIT 1;

-- name: manifest_head
SELECT sha256 FROM {schema}.events WHERE seq = :seq;

-- name: first_events
-- event 1 and its successor: verify names another package's manifest first only where they chain
SELECT seq, sha256, parent_sha256, body FROM {schema}.events WHERE seq IN (1, 2) ORDER BY seq;

-- name: manifest_identity
-- the manifest is taken from the events it publishes, never from the helper rows beside them
SELECT body FROM {schema}.events WHERE stream = 'case' AND type = 'case.created' ORDER BY seq LIMIT 2;

-- name: manifest_lifecycle
-- the newest event that set the case's state, at or before the exported head (all are in the case
-- stream: its index keeps this read short on a ledger of many budget events)
SELECT body FROM {schema}.events
WHERE stream = 'case' AND type IN ('case.created', 'revision.opened', 'case.transitioned') AND seq <= :seq
ORDER BY seq DESC LIMIT 1;

-- name: manifest_budget_artifact
SELECT stream, revision, stream_seq, sha256 FROM {schema}.events
WHERE stream = 'budget' AND seq <= :seq ORDER BY seq DESC LIMIT 1;

-- name: manifest_evidence_artifact
SELECT f.path, e.revision, e.stream_seq, e.sha256 FROM {schema}.events AS e
JOIN {schema}.evidence_files AS f ON f.seq = e.seq
WHERE e.type = 'evidence.indexed' AND e.seq <= :seq ORDER BY e.seq DESC LIMIT 1;

-- name: has_account_floors
SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'account_floors';

-- name: has_evidence_files
SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'evidence_files';

-- name: event_addresses_before_evidence
-- a ledger older than the evidence store (schema version < 6) has no evidence_files table
SELECT stream, revision, stream_seq FROM {schema}.events;

-- name: head_address_before_evidence
SELECT stream, revision, stream_seq FROM {schema}.events ORDER BY seq DESC LIMIT 1;

-- name: events_for_export_before_evidence
SELECT seq, stream, revision, stream_seq, body FROM {schema}.events ORDER BY seq;

-- name: manifest_evidence_artifact_before_evidence
SELECT NULL WHERE 0;

-- name: sqlite_check
-- verify: SQLite's own check of the file's pages, rows and indexes ({check} is quick_check, or
-- integrity_check with --strict); one row 'ok', or up to 20 problems naming page and row.
PRAGMA {schema}.{check}(20);

-- name: has_migrations_table
SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: migrations_table_sql
-- as bytes: text the file's encoding cannot give as UTF-8 is no match, never an error
SELECT CAST(sql AS BLOB) FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: schema_version_of
SELECT COALESCE(MAX(version), 0) FROM {schema}.schema_migrations;

-- name: schema_objects
-- tables, views and indexes, whose names are one namespace (a trigger's name is of its own:
-- a trigger may be named like a view; schema_objects_typed has both)
SELECT name, sql FROM {schema}.sqlite_master
WHERE type IN ('view', 'index', 'table') AND sql IS NOT NULL;

-- name: schema_objects_typed
SELECT type, name, tbl_name, sql FROM {schema}.sqlite_master
WHERE type IN ('trigger', 'view', 'index', 'table') AND sql IS NOT NULL
ORDER BY name;

-- name: table_columns
PRAGMA {schema}.table_info({table});

-- name: schema_text_bytes
-- verify, when the sqlite3 module could not read a text as UTF-8: each schema object's name and statement as bytes
SELECT type, CAST(name AS BLOB), CAST(sql AS BLOB) FROM {schema}.sqlite_master ORDER BY rowid;

-- name: text_bytes
-- verify, when the sqlite3 module could not read a text as UTF-8: a column's stored text as bytes, by key
SELECT {key}, CAST({column} AS BLOB) FROM {schema}.{table} WHERE typeof({column}) = 'text' ORDER BY {key};

-- name: rows_differ
-- verify: the first row (by {order}) present in only one of orig.{table} and main.{table}, its values
-- compared with their storage classes ({types}: typeof() of every column, after them; 10.0 = 10 in SQL),
-- after the side it is on: 'ledger' (orig: the ledger's row the replay does not derive) or 'replay'
SELECT 'ledger' AS side_, * FROM (SELECT *, {types} FROM orig.{table} EXCEPT SELECT *, {types} FROM main.{table})
UNION ALL SELECT 'replay', * FROM (SELECT *, {types} FROM main.{table} EXCEPT SELECT *, {types} FROM orig.{table})
ORDER BY {order} LIMIT 1;

-- name: row_counts
-- verify: how many rows orig.{table} and main.{table} hold (rows_differ compares sets)
SELECT (SELECT COUNT(*) FROM orig.{table}), (SELECT COUNT(*) FROM main.{table});

-- name: repeated_row
-- verify: the first row (by seq) orig.{table} holds more than once ({columns}: all of its columns)
SELECT seq FROM orig.{table} GROUP BY {columns} HAVING COUNT(*) > 1 ORDER BY seq LIMIT 1;

-- name: view_rows_differ
-- verify: rows_differ for a view, each side computed once (MATERIALIZED) instead of once per EXCEPT
WITH o AS MATERIALIZED (SELECT * FROM orig.{table}), m AS MATERIALIZED (SELECT * FROM main.{table})
SELECT * FROM (SELECT *, {types} FROM o EXCEPT SELECT *, {types} FROM m)
UNION ALL SELECT * FROM (SELECT *, {types} FROM m EXCEPT SELECT *, {types} FROM o)
ORDER BY {order} LIMIT 1;

-- name: events_since
-- ledger events: the hash chain after a given seq
SELECT seq, type, revision, created_at, sha256, parent_sha256{body} FROM events WHERE seq > :since ORDER BY seq;

-- name: index_shape
-- verify: how a foreign index on a ledger table is built: UNIQUE, partial (WHERE), expression
-- columns (cid -2) and collations that are not SQLite's own
SELECT il."unique", il.partial,
       (SELECT COUNT(*) FROM pragma_index_xinfo(:name, '{schema}') WHERE key AND cid = -2),
       (SELECT COUNT(*) FROM pragma_index_xinfo(:name, '{schema}')
         WHERE key AND coll IS NOT NULL AND upper(coll) NOT IN ('BINARY', 'NOCASE', 'RTRIM'))
FROM pragma_index_list(:table, '{schema}') AS il WHERE il.name = :name;

-- name: migration_rows
SELECT version, name FROM {schema}.schema_migrations ORDER BY version;

-- name: event_columns_at
-- verify: the columns events_differ compares, of one seq of one side (orig: the ledger, main: the replay)
SELECT type, revision, stream, stream_seq, created_at, sha256, parent_sha256, operation_key, request_sha256, body,
       typeof(revision), typeof(stream_seq)
FROM {schema}.events WHERE seq = :seq;

-- name: events_differ
-- verify: the first seq at which orig.events and main.events differ in any column, or where a
-- row is in only one of them (what rows_differ finds, by seq lookups instead of two sorts)
SELECT o.seq FROM orig.events AS o LEFT JOIN main.events AS m ON m.seq = o.seq
WHERE m.seq IS NULL OR o.type IS NOT m.type OR o.revision IS NOT m.revision OR o.stream IS NOT m.stream
   OR o.stream_seq IS NOT m.stream_seq OR o.created_at IS NOT m.created_at OR o.sha256 IS NOT m.sha256
   OR o.parent_sha256 IS NOT m.parent_sha256 OR o.operation_key IS NOT m.operation_key
   OR o.request_sha256 IS NOT m.request_sha256 OR o.body IS NOT m.body
   OR typeof(o.revision) IS NOT typeof(m.revision) OR typeof(o.stream_seq) IS NOT typeof(m.stream_seq)
UNION ALL
SELECT m.seq FROM main.events AS m LEFT JOIN orig.events AS o ON o.seq = m.seq WHERE o.seq IS NULL
ORDER BY 1 LIMIT 1;

-- name: migration_times
SELECT version, applied_at FROM {schema}.schema_migrations ORDER BY version;

-- name: schema_names
-- every table and index, those SQLite makes itself (no SQL text) too: what statistics may name
SELECT type, name, tbl_name FROM {schema}.sqlite_master WHERE type IN ('table', 'index');

-- name: statistics_rows
-- what ANALYZE wrote into one of SQLite's statistics tables (sqlite_stat1 has stat; 2-4 have samples)
SELECT tbl, idx, {stat} FROM {schema}.{table};
