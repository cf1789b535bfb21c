-- 0001 executions: the shared index of run instances and their step timeline
--
-- Why: each run instance's authoritative journal lives in its own Durable
-- Object (see src/engine/journal.sql). Dashboards, the HTTP API and the
-- periodic sweep must answer "what is running, what is overdue, what did
-- this instance do" without waking thousands of objects, so every instance
-- mirrors its status and step timeline here, in ONE batch at each
-- suspension and at completion (never per step: the hot path stays off D1).
--
-- Owner: src/store/executions.rs (SQL) on behalf of src/engine/executor.rs.
-- Replay: the mirror is an upsert keyed by (execution_id, seq), so a batch
-- sent twice (an executor that crashed after D1 committed) changes nothing.
-- Times are ms since the Unix epoch (UTC) everywhere.

CREATE TABLE executions (
  -- Instance id: the semantic key normalized to [A-Za-z0-9_-]{1,100}; it
  -- also names the instance's Durable Object.
  id TEXT PRIMARY KEY NOT NULL,
  -- The semantic idempotency key before normalization, e.g.
  -- "check:octo/hello:0123456789ab" (ADR-0001 rule 1). Unique: two events of
  -- the same identity are one instance.
  key TEXT NOT NULL UNIQUE,
  -- Which run executes the instance ("check", "deploy", ...).
  run TEXT NOT NULL,
  -- "owner/name" of the repository the instance acts on; NULL for runs that
  -- act on no repository (engine tests, benchmarks).
  repo TEXT,
  -- The external entity the event was about ("pr:12", "branch:main"), so
  -- an operator can list every execution of one entity (ADR-0001 rule 4).
  entity TEXT,
  -- The commit the instance is about, full 40 hex; NULL when none.
  sha TEXT,
  status TEXT NOT NULL CHECK (status IN
    ('queued','running','waiting','paused','errored','terminated','complete','skipped')),
  -- Why an instance ended skipped ("not-configured", "superseded",
  -- "not_current", "queued_timeout", ...) or why it waits; NULL otherwise.
  -- An operator's explicit skip records none (queue-policy seed).
  reason TEXT,
  -- The typed error tag when errored ("StepTimedOut", "RunDurationExceeded",
  -- ...) and its human message.
  error_tag TEXT,
  error_message TEXT,
  -- When the instance must next run (ms); the sweep resumes instances whose
  -- wake-up is overdue (lost alarm, crashed executor). NULL once terminal
  -- and while paused.
  wake_at_ms INTEGER,
  -- The run's input as JSON, kept so the sweep can recreate an instance
  -- whose object never received it (a create that died half way).
  input_json TEXT NOT NULL,
  -- The run's result as JSON when complete (capped by the engine at 1 MiB).
  output_json TEXT,
  step_count INTEGER NOT NULL DEFAULT 0,
  -- Cost counters, kept so operators and `npm run bench` can see what an
  -- instance cost: writes to its own storage (the journal; one per step),
  -- D1 round trips (one per pass: the mirror batch, plus the create), and
  -- executor passes (one per wake-up).
  journal_writes INTEGER NOT NULL DEFAULT 0,
  index_round_trips INTEGER NOT NULL DEFAULT 0,
  passes INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  -- Set when the instance reaches a terminal status; the sweep purges
  -- instances older than the retention (30 days by default) by it.
  finished_ms INTEGER
);

-- The sweep's query: non-terminal instances by wake-up time.
CREATE INDEX executions_by_wake ON executions (status, wake_at_ms);
-- Listing by repository and run, newest first.
CREATE INDEX executions_by_repo ON executions (repo, run, created_ms);
-- Listing by entity (every execution of PR 12, say).
CREATE INDEX executions_by_entity ON executions (entity, created_ms);
-- The retention purge.
CREATE INDEX executions_by_finished ON executions (finished_ms);

CREATE TABLE execution_steps (
  execution_id TEXT NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
  -- Position of the durable call in the run body (0-based), the replay key.
  seq INTEGER NOT NULL,
  -- The step's name as the run wrote it, with its occurrence count when the
  -- same name repeats ("poll#3").
  name TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('step','sleep','wait')),
  -- done: result journaled; failed: ended in a typed error; retrying: a
  -- failed attempt waits for its backoff; waiting: a sleep or event wait in
  -- progress.
  state TEXT NOT NULL CHECK (state IN ('done','failed','retrying','waiting')),
  attempts INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER,
  -- For sleeps and waits: when it ends (or times out); for retries: when
  -- the next attempt starts.
  wake_at_ms INTEGER,
  error_tag TEXT,
  error_message TEXT,
  -- Size of the journaled result; the value itself stays in the journal.
  result_bytes INTEGER,
  PRIMARY KEY (execution_id, seq)
);
