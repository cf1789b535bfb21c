-- 0003 gates: the serial queue, pool admission slots and container leases
--
-- Why: deploys of one group must never overlap and the newest commit must
-- win (ADR-0004); a container pool admits a bounded number of runs at once;
-- a sandbox must have one user at a time. D1 serializes writes per
-- database, so one conditional statement (its `changes` or its RETURNING
-- rows) is an atomic claim, which is all three gates need: no new
-- infrastructure.
--
-- Owner: src/gates/serial.rs (serial_queue), src/gates/admission.rs
-- (pool_slots), src/gates/lease.rs (container_leases); the SQL sits next to
-- the function that binds it.
-- Replay: every gate operation runs inside a durable step that may execute
-- more than once. Rows are keyed by (group, execution), (pool, holder) and
-- sandbox id, so a repeated enqueue, claim, heartbeat or release finds its
-- own row and changes nothing it has not already changed.
-- NULLs: a NULL column means "does not apply" (never "unknown"); each is
-- named below. No backfill: the tables are new.
-- Times are ms since the Unix epoch (UTC) everywhere.

CREATE TABLE serial_queue (
  -- Arrival order, larger than every row present when inserted (the
  -- rowid), so "older waiter" and FIFO are exact even within one ms.
  seq INTEGER PRIMARY KEY,
  -- The serialization group, e.g. "deploy:octo/hello:main:deploy" (repo,
  -- branch, check label); each run that serializes documents its key.
  group_key TEXT NOT NULL,
  -- The execution (instance id) queued or holding.
  execution_id TEXT NOT NULL,
  -- The revision the execution would ship (a full commit sha).
  revision TEXT NOT NULL,
  -- 1 for an imperative execution (an operator's raw command): exempt from
  -- queue policy on both sides (never superseded, aged out or skipped as not
  -- current; supersedes nobody), but it still waits its turn.
  imperative INTEGER NOT NULL DEFAULT 0 CHECK (imperative IN (0, 1)),
  -- waiting: queued; holding: owns the group (at most one per group);
  -- released: left on any exit path (a waiter that withdrew too);
  -- superseded: a newer arrival replaced it; timed_out: waited past the
  -- queued timeout behind a live holder; skipped: not current at arrival,
  -- or an operator skipped it; stale: a holder whose heartbeat staled and
  -- whose group the next claimant took over.
  -- Transitions: waiting -> any; holding -> released | stale; the others
  -- are final. A holding row is never superseded, timed out or skipped.
  state TEXT NOT NULL CHECK (state IN
    ('waiting','holding','released','superseded','timed_out','skipped','stale')),
  -- ms when enqueued: the queued timeout and supersede-after ages run from it.
  arrived_ms INTEGER NOT NULL,
  -- ms of the last sign of life: a holder's heartbeat, a waiter's last
  -- claim poll. A holder silent for 10 minutes stops blocking (ADR-0004); a
  -- waiter silent as long stops blocking the waiters behind it.
  heartbeat_ms INTEGER NOT NULL,
  -- ms when it took the group; NULL for a row that never held it.
  claimed_ms INTEGER,
  -- The revision that made the row obsolete, named in its neutral check:
  -- the superseding arrival's revision, or for not_current the branch head
  -- read at arrival. NULL otherwise.
  superseded_by TEXT,
  -- Why an automatic skip happened; NULL for an operator's skip and for
  -- rows that were not skipped (queue-policy seed).
  skipped_reason TEXT CHECK (skipped_reason IS NULL OR skipped_reason IN
    ('superseded','not_current','queued_timeout','confirmation_timeout')),
  -- The execution that ended this row's turn: the superseding arrival, or
  -- the claimant that took over from a stale holder. NULL otherwise.
  ended_by TEXT,
  -- ms of the last change of state (or of a holder's heartbeat); the purge
  -- of ended rows goes by it.
  updated_ms INTEGER NOT NULL,
  UNIQUE (group_key, execution_id),
  -- A CHECK passes on NULL, so reasons are compared with IS / COALESCE.
  CHECK (state <> 'superseded' OR (skipped_reason IS 'superseded' AND superseded_by IS NOT NULL)),
  CHECK (state <> 'timed_out' OR COALESCE(skipped_reason IN ('queued_timeout','confirmation_timeout'), 0)),
  CHECK (skipped_reason IS NULL OR state IN ('superseded','timed_out','skipped')),
  CHECK (skipped_reason IS NOT 'not_current' OR (state = 'skipped' AND superseded_by IS NOT NULL)),
  CHECK (skipped_reason IS NOT 'superseded' OR state = 'superseded'),
  CHECK (imperative = 0 OR skipped_reason IS NULL),
  CHECK (state NOT IN ('holding','stale') OR claimed_ms IS NOT NULL)
);

-- Claims and supersedes scan one group's rows of one state in arrival order.
CREATE INDEX serial_queue_by_group ON serial_queue (group_key, state, seq);
-- The overview of groups with live rows.
CREATE INDEX serial_queue_by_state ON serial_queue (state, group_key);
-- The purge of ended rows.
CREATE INDEX serial_queue_by_updated ON serial_queue (updated_ms);

CREATE TABLE pool_slots (
  -- Arrival order within a pool (the rowid): admission is FIFO by it.
  seq INTEGER PRIMARY KEY,
  -- The container pool (one per container class), e.g. "sandbox".
  pool TEXT NOT NULL,
  -- The execution queued for or holding a slot.
  holder TEXT NOT NULL,
  -- queued: waiting for capacity; admitted: counts against it. A released
  -- or expired slot is deleted, so a row always counts or waits.
  state TEXT NOT NULL CHECK (state IN ('queued','admitted')),
  -- ms when first queued.
  arrived_ms INTEGER NOT NULL,
  -- ms when admitted; NULL while queued.
  admitted_ms INTEGER,
  -- ms of the last acquire poll (queued) or heartbeat (admitted); a slot
  -- older than SLOT_TTL_MS (src/limits.rs) is deleted by the next acquire.
  heartbeat_ms INTEGER NOT NULL,
  UNIQUE (pool, holder),
  CHECK ((state = 'admitted') = (admitted_ms IS NOT NULL))
);

-- Admission counts one pool's admitted and earlier queued slots.
CREATE INDEX pool_slots_by_pool ON pool_slots (pool, state, seq);

CREATE TABLE container_leases (
  -- One row per sandbox (container) id: at most one holder at a time.
  sandbox_id TEXT PRIMARY KEY NOT NULL,
  -- The execution holding the sandbox.
  holder TEXT NOT NULL,
  -- ms when this holder took the lease (kept across its heartbeats).
  acquired_ms INTEGER NOT NULL,
  -- ms of the holder's last heartbeat.
  heartbeat_ms INTEGER NOT NULL,
  -- ms after which the lease is stale: the next claimant reclaims it in the
  -- same conditional upsert that claims it (heartbeat + LEASE_TTL_MS).
  expires_ms INTEGER NOT NULL,
  CHECK (acquired_ms <= heartbeat_ms AND heartbeat_ms <= expires_ms)
);
