-- Named statements used by ledger/storage.py. Each block starts with "-- name: <name>".
-- Every read the write path makes is an indexed, bounded lookup (no scan of history).

-- name: head
SELECT seq, sha256, created_at FROM events ORDER BY seq DESC LIMIT 1;

-- name: case_head
SELECT (SELECT case_id FROM case_identity), (SELECT package_id FROM case_identity), seq, revision, state
FROM lifecycle ORDER BY seq DESC LIMIT 1;

-- name: stream_count_case
-- case events never go back in revision, so the last by (revision, stream_seq) is the newest
SELECT COALESCE((SELECT stream_seq FROM events WHERE stream = 'case'
                 ORDER BY revision DESC, stream_seq DESC LIMIT 1), 0);

-- name: stream_count_budget
SELECT COALESCE(MAX(stream_seq), 0) FROM events WHERE stream = 'budget' AND revision = :revision;

-- name: budget_events_total
-- one bounded lookup per revision instead of counting every event
SELECT COALESCE(SUM((SELECT MAX(e.stream_seq) FROM events AS e
                     WHERE e.stream = 'budget' AND e.revision = r.revision)), 0)
FROM revisions AS r;

-- name: latest_budget_body
SELECT body FROM events WHERE stream = 'budget' AND revision = :revision
ORDER BY stream_seq DESC LIMIT 1;

-- name: revision
SELECT revision, seq, units_per_hypothesis, max_hypotheses, hypothesis_batch_sha256
FROM revisions WHERE revision = :revision;

-- name: revision_hypotheses
SELECT hypothesis_id, statement, allocation_units FROM hypotheses
WHERE revision = :revision ORDER BY CAST(substr(hypothesis_id, 2) AS INTEGER);

-- name: policy
SELECT policy, policy_sha256 FROM policies WHERE revision = :revision;

-- name: latest_policy_before
SELECT policy, policy_sha256 FROM policies WHERE revision < :revision ORDER BY revision DESC LIMIT 1;

-- name: operation
SELECT seq, request_sha256, type FROM events WHERE operation_key = :operation_key;

-- name: event_by_seq
SELECT seq, type, revision, COALESCE((SELECT path FROM evidence_files AS f WHERE f.seq = events.seq), stream), stream_seq, created_at, sha256, parent_sha256, operation_key, request_sha256, body
FROM events WHERE seq = :seq;

-- name: action_state
SELECT r.action, r.cost_units, res.novelty_score, c.outcome, c.semantic_score, c.information_score,
       c.reward_units, res.action_id IS NOT NULL
FROM reservations AS r
LEFT JOIN results AS res
    ON res.revision = r.revision AND res.hypothesis_id = r.hypothesis_id AND res.action_id = r.action_id
LEFT JOIN closings AS c
    ON c.revision = r.revision AND c.hypothesis_id = r.hypothesis_id AND c.action_id = r.action_id
WHERE r.revision = :revision AND r.hypothesis_id = :hypothesis_id AND r.action_id = :action_id;

-- name: content_exists
SELECT 1 FROM contents WHERE sha256 = :sha256;

-- name: content_bytes_total
-- the running total after the newest event's contents: the largest of its rows, whatever order the
-- rows of that event are stored in (a VACUUM or a dump and reload may renumber them)
SELECT COALESCE((SELECT MAX(cumulative_bytes) FROM contents WHERE seq = (SELECT MAX(seq) FROM contents)), 0);

-- name: termination_exists
SELECT 1 FROM terminations WHERE revision = :revision AND hypothesis_id = :hypothesis_id;

-- name: insert_event
INSERT INTO events (seq, type, revision, stream, stream_seq, created_at, sha256, parent_sha256,
                    operation_key, request_sha256, body)
VALUES (:seq, :type, :revision, :stream, :stream_seq, :created_at, :sha256, :parent_sha256,
        :operation_key, :request_sha256, :body);

-- name: insert_content
INSERT INTO contents (sha256, seq, size_bytes, cumulative_bytes, body)
VALUES (:sha256, :seq, :size_bytes, :cumulative_bytes, :body);

-- name: insert_case_identity
INSERT INTO case_identity (seq, case_id, package_id) VALUES (:seq, :case_id, :package_id);

-- name: insert_lifecycle
INSERT INTO lifecycle (seq, revision, from_state, state) VALUES (:seq, :revision, :from_state, :state);

-- name: insert_revision
INSERT INTO revisions (revision, seq, units_per_hypothesis, max_hypotheses, hypothesis_batch_sha256)
VALUES (:revision, :seq, :units_per_hypothesis, :max_hypotheses, :hypothesis_batch_sha256);

-- name: insert_hypothesis
INSERT INTO hypotheses (revision, hypothesis_id, seq, statement, allocation_units)
VALUES (:revision, :hypothesis_id, :seq, :statement, :allocation_units);

-- name: insert_policy
INSERT INTO policies (revision, seq, policy_sha256, policy) VALUES (:revision, :seq, :policy_sha256, :policy);

-- name: insert_account
INSERT INTO accounts (revision, hypothesis_id, seq, initial_units)
VALUES (:revision, :hypothesis_id, :seq, :initial_units);

-- name: insert_reservation
INSERT INTO reservations (revision, hypothesis_id, action_id, seq, action, cost_units)
VALUES (:revision, :hypothesis_id, :action_id, :seq, :action, :cost_units);

-- name: insert_result
INSERT INTO results (revision, hypothesis_id, action_id, seq, content_sha256, novelty_score)
VALUES (:revision, :hypothesis_id, :action_id, :seq, :content_sha256, :novelty_score);

-- name: insert_result_source
INSERT INTO result_sources (revision, hypothesis_id, action_id, path, seq, sha256)
VALUES (:revision, :hypothesis_id, :action_id, :path, :seq, :sha256);

-- name: insert_closing
INSERT INTO closings (revision, hypothesis_id, action_id, seq, outcome, semantic_score, information_score, reward_units)
VALUES (:revision, :hypothesis_id, :action_id, :seq, :outcome, :semantic_score, :information_score, :reward_units);

-- name: insert_termination
INSERT INTO terminations (revision, hypothesis_id, seq, status, terminal_reason)
VALUES (:revision, :hypothesis_id, :seq, :status, :terminal_reason);

-- name: insert_initial_termination
-- An account initialize opened already ended: a row from schema version 10 on (010_initial_terminations.sql).
INSERT INTO terminations (revision, hypothesis_id, seq, status, terminal_reason)
SELECT :revision, :hypothesis_id, :seq, :status, :terminal_reason
WHERE EXISTS (SELECT 1 FROM schema_migrations WHERE version >= 10);

-- name: insert_migration
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :applied_at);

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM schema_migrations;

-- --- scoped limits (sql/004_scopes.sql) --------------------------------------------

-- name: scope_latest
SELECT seq, scope, scope_type, scope_id, scope_revision, scope_hypothesis, establishment, issuer, delegate,
       warning_bps, on_exhausted, causation_seq, origin_at
FROM scope_establishments WHERE scope = :scope ORDER BY seq DESC LIMIT 1;

-- name: scope_limits_of
SELECT dimension, declared FROM scope_limits WHERE seq = :seq;

-- name: scope_warned
SELECT dimension FROM limit_warnings WHERE scope = :scope AND establishment_seq = :establishment_seq;

-- name: money_consumed_case
SELECT case_total FROM money_totals ORDER BY seq DESC LIMIT 1;

-- name: money_consumed_revision
SELECT revision_total FROM money_totals WHERE revision = :revision ORDER BY seq DESC LIMIT 1;

-- name: money_consumed_account
SELECT hypothesis_total FROM money_totals WHERE revision = :revision AND hypothesis_id = :hypothesis_id
ORDER BY seq DESC LIMIT 1;

-- name: insert_money_total
INSERT INTO money_totals (seq, revision, hypothesis_id, hypothesis_total, revision_total, case_total)
VALUES (:seq, :revision, :hypothesis_id, :hypothesis_total, :revision_total, :case_total);

-- name: revision_issuer
SELECT json_extract(e.body, '$.actor') FROM policies AS p JOIN events AS e ON e.seq = p.seq
WHERE p.revision = :revision;

-- name: lowest_pct_since_grant
-- the soft gate: the lowest floor(100 * remaining / (initial + granted)) of one account after
-- every budget event of its revision since its last grant: the newest account_floors row
SELECT lowest_pct FROM account_floors WHERE revision = :revision AND hypothesis_id = :hypothesis_id
ORDER BY seq DESC LIMIT 1;

-- name: account_floors_of_revision
-- each account's floor (its newest account_floors row) or NULL, for the writer's next budget event
SELECT a.hypothesis_id, (SELECT f.lowest_pct FROM account_floors AS f
                         WHERE f.revision = a.revision AND f.hypothesis_id = a.hypothesis_id
                         ORDER BY f.seq DESC LIMIT 1)
FROM accounts AS a WHERE a.revision = :revision;

-- name: insert_account_floor
INSERT INTO account_floors (revision, hypothesis_id, seq, lowest_pct)
VALUES (:revision, :hypothesis_id, :seq, :lowest_pct);

-- name: insert_scope_establishment
INSERT INTO scope_establishments (seq, scope, scope_type, scope_id, scope_revision, scope_hypothesis, establishment,
                                  issuer, delegate, warning_bps, on_exhausted, causation_seq, origin_at)
VALUES (:seq, :scope, :scope_type, :scope_id, :scope_revision, :scope_hypothesis, :establishment,
        :issuer, :delegate, :warning_bps, :on_exhausted, :causation_seq, :origin_at);

-- name: insert_scope_limit
INSERT INTO scope_limits (seq, scope, dimension, declared) VALUES (:seq, :scope, :dimension, :declared);

-- name: insert_limit_warning
INSERT INTO limit_warnings (scope, dimension, establishment_seq, seq, consumed)
VALUES (:scope, :dimension, :establishment_seq, :seq, :consumed);

-- name: insert_limit_exceedance
INSERT INTO limit_exceedances (seq, scope, dimension, declared, consumed_after, on_exhausted)
VALUES (:seq, :scope, :dimension, :declared, :consumed_after, :on_exhausted);

-- name: insert_increase_request
INSERT INTO increase_requests (seq, scope, dimension, amount, requester)
VALUES (:seq, :scope, :dimension, :amount, :requester);

-- name: insert_result_cost
INSERT INTO result_costs (revision, hypothesis_id, action_id, seq, cost_usd_millicents)
VALUES (:revision, :hypothesis_id, :action_id, :seq, :cost_usd_millicents);

-- name: insert_grant
INSERT INTO grants (revision, hypothesis_id, grant_id, seq, units)
VALUES (:revision, :hypothesis_id, :grant_id, :seq, :units);

-- --- the evidence store (sql/006_evidence.sql) ---------------------------------------

-- name: insert_evidence_record
INSERT INTO evidence_records (record_id, seq, revision, hypothesis_id, action_id, operation_id, content_sha256,
                              duplicate_of, novelty_score, body)
VALUES (:record_id, :seq, :revision, :hypothesis_id, :action_id, :operation_id, :content_sha256,
        :duplicate_of, :novelty_score, :body);

-- name: insert_evidence_atom
INSERT INTO evidence_atoms (atom_sha256, seq, record_id) VALUES (:atom_sha256, :seq, :record_id);

-- name: insert_evidence_index
INSERT INTO evidence_indexes (seq, index_sha256, next_record_number, record_count)
VALUES (:seq, :index_sha256, :next_record_number, :record_count);

-- name: evidence_by_operation
SELECT record_id FROM evidence_records WHERE operation_id = :operation_id ORDER BY record_id LIMIT 1;

-- name: evidence_by_action
SELECT record_id, operation_id FROM evidence_records
WHERE revision = :revision AND hypothesis_id = :hypothesis_id AND action_id = :action_id
ORDER BY record_id LIMIT 1;

-- name: evidence_first_with_content
SELECT record_id FROM evidence_records WHERE content_sha256 = :content_sha256 ORDER BY record_id LIMIT 1;

-- name: evidence_atom_exists
SELECT 1 FROM evidence_atoms WHERE atom_sha256 = :atom_sha256;

-- name: evidence_record_body
SELECT body FROM evidence_records WHERE record_id = :record_id;

-- name: evidence_index_head
SELECT i.index_sha256, i.next_record_number, i.record_count, json_extract(e.body, '$.format')
FROM evidence_indexes AS i JOIN events AS e ON e.seq = i.seq ORDER BY i.seq DESC LIMIT 1;

-- name: evidence_indexed_sha
-- the record hash listed for :record_id by the first index published after the record (its own)
SELECT json_extract(j.value, '$.sha256') FROM events AS e, json_each(e.body, '$.index.records') AS j
WHERE e.seq = (SELECT MIN(i.seq) FROM evidence_indexes AS i
               WHERE i.seq > (SELECT r.seq FROM evidence_records AS r WHERE r.record_id = :record_id))
  AND json_extract(j.value, '$.record_id') = :record_id;

-- name: reservation_seq
SELECT seq FROM reservations
WHERE revision = :revision AND hypothesis_id = :hypothesis_id AND action_id = :action_id;

-- name: evidence_events_of_batch
-- the events of the batch whose first event is :seq, up to and including its index
SELECT COALESCE((SELECT path FROM evidence_files AS f WHERE f.seq = events.seq), stream), body FROM events
WHERE seq >= :seq AND seq <= (SELECT MIN(seq) FROM events WHERE type = 'evidence.indexed' AND seq >= :seq)
ORDER BY seq;

-- name: insert_evidence_file
INSERT INTO evidence_files (seq, path) VALUES (:seq, :path);

-- --- asynchronous tests and feedback (sql/006_evidence.sql) ----------------------------

-- name: insert_test_request
INSERT INTO test_requests (operation_id, seq, revision, hypothesis_id, action_id, kind)
VALUES (:operation_id, :seq, :revision, :hypothesis_id, :action_id, :kind);

-- name: insert_feedback_draft
INSERT INTO feedback_drafts (feedback_id, seq, operation_id, submission_sha256)
VALUES (:feedback_id, :seq, :operation_id, :submission_sha256);

-- name: insert_feedback_confirmation
INSERT INTO feedback_confirmations (feedback_id, seq) VALUES (:feedback_id, :seq);

-- name: test_request
SELECT seq, revision, hypothesis_id, action_id, kind FROM test_requests WHERE operation_id = :operation_id;

-- name: limit_refusal_recorded
-- The newest limit.exceeded recorded for the same refused request against the same limit (docs/scopes.md).
SELECT l.seq FROM limit_exceedances AS l JOIN events AS e ON e.seq = l.seq
WHERE l.scope = :scope AND l.dimension = :dimension AND l.declared = :declared
  AND l.on_exhausted = :on_exhausted AND (:consumed_after IS NULL OR l.consumed_after = :consumed_after)
  AND json_extract(e.body, '$.establishment_seq') = :establishment_seq
  AND json_extract(e.body, '$.revision') = :revision
  AND json_extract(e.body, '$.request') = :request
ORDER BY l.seq DESC LIMIT 1;

-- name: test_of_action
SELECT operation_id FROM test_requests
WHERE revision = :revision AND hypothesis_id = :hypothesis_id AND action_id = :action_id;

-- name: feedback_draft
SELECT d.seq, e.body, EXISTS (SELECT 1 FROM feedback_confirmations AS c WHERE c.feedback_id = d.feedback_id)
FROM feedback_drafts AS d JOIN events AS e ON e.seq = d.seq WHERE d.feedback_id = :feedback_id;

-- name: feedback_count
SELECT COUNT(*) FROM feedback_drafts;

-- name: attachment_content
SELECT body FROM contents WHERE sha256 = :sha256;

-- name: insert_outcome
INSERT INTO outcomes (seq, revision, outcome, source) VALUES (:seq, :revision, :outcome, :source);

-- name: insert_result_atom
INSERT INTO result_atoms (atom_id, seq) VALUES (:atom_id, :seq);

-- name: result_atoms_seen
SELECT COUNT(DISTINCT atom_id) FROM result_atoms WHERE atom_id IN (SELECT value FROM json_each(:atoms));

-- name: scope_names
-- every scope that has an establishment (one row per establishment: a small table)
SELECT DISTINCT scope FROM scope_establishments;

-- name: duration_limited_scopes
-- the scopes whose newest establishment limits duration_ms (a warning may come due after any event)
SELECT s.scope FROM scope_establishments AS s
JOIN scope_limits AS l ON l.seq = s.seq AND l.dimension = 'duration_ms'
WHERE s.seq = (SELECT MAX(s2.seq) FROM scope_establishments AS s2 WHERE s2.scope = s.scope);
