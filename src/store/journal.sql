-- The step journal of ONE run instance, in its Durable Object's own SQLite
-- storage (state.storage().sql()), or in native SQLite in tests.
--
-- Why: this is the authoritative record of what the instance did. Writes
-- here cost ~0.1-0.2 ms and are durable before the object's next outgoing
-- request leaves (output gates), against ~2.5 ms for a D1 round trip, so
-- each completed step is exactly one write here and none in D1. D1 receives
-- a mirror in one batch per suspension or completion (migrations/0001).
--
-- Owner: src/store/journal.rs on behalf of src/engine/.
-- Each table is created by the first write that needs it
-- (src/store/journal_tables.rs): a new object creates none until its
-- create saves the record, and a run that never waits for an event or
-- keeps an interrupt never creates those tables. Every statement is
-- idempotent (IF NOT EXISTS).
-- Times are ms since the Unix epoch.

CREATE TABLE IF NOT EXISTS instance (
  -- Exactly one row: this object IS the instance.
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  -- The whole InstanceRecord (src/engine/journal.rs) as versioned JSON:
  -- read and written whole, never queried by field.
  record TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS journal (
  -- Position of the durable call in the run body: the replay key.
  seq INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('step','sleep','wait')),
  state TEXT NOT NULL CHECK (state IN ('done','failed','retrying','waiting')),
  -- done: the step's result as JSON (at most 1 MiB); failed: the typed
  -- error as JSON; NULL while retrying or waiting.
  value TEXT,
  error_tag TEXT,
  error_message TEXT,
  attempts INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER,
  -- Sleep end, event-wait deadline, or next retry.
  wake_at_ms INTEGER,
  -- Increasing write revision: the D1 mirror sends rows with rev above the
  -- last mirrored one.
  rev INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  type TEXT NOT NULL,
  -- The event's payload as JSON.
  payload TEXT NOT NULL,
  received_ms INTEGER NOT NULL,
  -- The journal seq of the wait that consumed it; NULL while kept for a
  -- wait that has not happened yet (an event sent early is not lost).
  consumed_by INTEGER
);

CREATE TABLE IF NOT EXISTS pending_interrupt (
  -- At most one row: the operator's pause or terminate that a running pass
  -- answered "pending" (202). Kept here, not in the record the pass saves
  -- whole, so a pass that dies before its next durable call does not drop
  -- it: the next drive reads it back before its pass (engine::driver).
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  kind TEXT NOT NULL CHECK (kind IN ('pause','terminate'))
);
