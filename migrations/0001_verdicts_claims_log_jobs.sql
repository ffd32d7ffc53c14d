-- gavel's shared Postgres store, schema version 1.
-- Applied by `gavel migrate` and at start-up of any gavel whose `[store] url` names Postgres;
-- which migrations ran is recorded in gavel_schema_migrations.

-- The verdict cache: one judge verdict (JSON) per cache key. The first verdict stored under a key
-- stands, so every replica reuses the same one.
CREATE TABLE gavel_verdicts (
    key        text PRIMARY KEY,
    verdict    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Cross-replica single-flight: the replica about to ask the judge for a key holds its row and
-- renews expires_at while the call runs. Others wait for the verdict, or for the claim to expire
-- (a dead replica stops renewing) and then take it over.
CREATE TABLE gavel_claims (
    key        text PRIMARY KEY,
    owner      text NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The scoring log: one row per scored group, appended in the same statement that makes it
-- visible (so a row is whole or absent), never updated.
CREATE TABLE gavel_scoring_log (
    id               bigserial PRIMARY KEY,
    scored_at        timestamptz NOT NULL DEFAULT now(),
    -- sha256 of the canonical request body below.
    request_hash     text NOT NULL,
    rubric_name      text NOT NULL,
    rubric_version   text NOT NULL,
    -- Absent when no judge was asked (a verifier-only policy).
    template_name    text,
    template_version text,
    -- [{"name": ..., "model": ...}] in panel order.
    judges           jsonb NOT NULL,
    -- One reward (or null) per trajectory, in request order.
    rewards          jsonb NOT NULL,
    -- Per trajectory: score, explanation, components, reasons, items, disagreement.
    scores           jsonb NOT NULL,
    -- judge_calls, cache_hits, tokens, retries, cost.
    usage            jsonb NOT NULL,
    -- The judge's error when the request asked for reward null on failure.
    error            jsonb,
    latency_ms       double precision NOT NULL,
    -- Which gavel process scored it (host/pid).
    replica          text NOT NULL,
    -- The canonical request body: `gavel rescore --from-log` scores it again. `json`, not
    -- `jsonb`: kept as written, so request_hash is the hash of exactly this text.
    request          json NOT NULL
);
CREATE INDEX gavel_scoring_log_rubric ON gavel_scoring_log (rubric_name, scored_at);
CREATE INDEX gavel_scoring_log_scored_at ON gavel_scoring_log (scored_at);
CREATE INDEX gavel_scoring_log_request ON gavel_scoring_log (request_hash);

-- Append-only: an audit log that can be edited is no audit log. Retention is an operator's
-- decision: drop the trigger, delete, re-create it.
CREATE FUNCTION gavel_scoring_log_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gavel_scoring_log is append-only (% refused)', TG_OP;
END
$$;
CREATE TRIGGER gavel_scoring_log_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON gavel_scoring_log
    FOR EACH STATEMENT EXECUTE FUNCTION gavel_scoring_log_append_only();

-- Resumable batch jobs (`gavel rescore`): finished units, and the output files' lengths at the
-- last checkpoint.
CREATE TABLE gavel_job_units (
    job  text NOT NULL,
    unit text NOT NULL,
    PRIMARY KEY (job, unit)
);
CREATE TABLE gavel_job_offsets (
    job         text PRIMARY KEY,
    output_len  bigint NOT NULL,
    rejects_len bigint NOT NULL
);
