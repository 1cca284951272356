-- Named statements of the fleet export (docs/fleet.md). Each block starts with "-- name: <name>".
-- The first four read one case's ledger.sqlite (SQLite), inside one read transaction (the
-- ledger is {schema}: main when opened itself, orig in the snapshot verify read); the
-- others are DuckDB statements. Placeholders in braces are identifiers, quoted string literals
-- or type maps the code builds from its own table and column lists, never from input.

-- name: fleet_head
SELECT case_id, package_id, package_generation, head_sha256 FROM {schema}.case_status;

-- name: fleet_events
SELECT seq, type, revision, stream, created_at, body ->> '$.actor' AS actor, sha256, parent_sha256, body
FROM {schema}.events ORDER BY seq;

-- name: fleet_view
SELECT * FROM {schema}.{table};

-- name: fleet_seq_of_sha
-- the seq of the event whose sha256 a fleet's record names as the case's head (none: no event has it)
SELECT seq FROM {schema}.events WHERE sha256 = ?;

-- name: fleet_copy_parquet
COPY (SELECT {columns} FROM read_json({source}, format = 'newline_delimited', columns = {types}))
TO {target} (FORMAT PARQUET, COMPRESSION ZSTD);

-- name: fleet_table_view
-- The case id is the folder's name after "case_id=", with %3A and %25 turned back into ":" and "%"
-- (partition_name's escapes), read as text: DuckDB's own Hive reading would take an id "NULL" for
-- SQL NULL and type ids that look like numbers.
CREATE VIEW {table} AS
SELECT replace(replace(regexp_extract(filename, 'case_id=([^/]*)/[^/]*$', 1), '%3A', ':'), '%25', '%') AS case_id,
       * EXCLUDE (filename)
FROM read_parquet({files}, hive_partitioning = false, filename = true);
