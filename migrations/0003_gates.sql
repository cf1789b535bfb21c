-- 0003 gates: the serial queue and container leases
--
-- Why: deploys of one group must never overlap and the newest commit must
-- win (ADR-0004); a sandbox must have one user at a time. D1 serializes
-- writes per database, so one conditional UPDATE whose `changes` is 1 is an
-- atomic claim, which is all both gates need: no new infrastructure.
--
-- Owner: src/gates/ (SQL next to the functions that bind it).
-- Times are ms since the Unix epoch.

CREATE TABLE serial_queue (
  -- The serialization group, e.g. "deploy:octo/hello:main" (+ label).
  group_key TEXT NOT NULL,
  -- The execution (instance id) queued or holding.
  execution_id TEXT NOT NULL,
  -- The revision the execution would ship (a commit sha).
  revision TEXT NOT NULL,
  -- Arrival order: ms when enqueued; ties broken by seq below.
  arrived_ms INTEGER NOT NULL,
  -- Monotonic arrival sequence across the table, so "older waiter" is
  -- exact even within one millisecond.
  seq INTEGER NOT NULL,
  -- waiting: queued behind a holder; holding: owns the group; released:
  -- done (any exit path); superseded: a newer waiter or a current
  -- revision replaced it; timed_out: waited past the queue timeout;
  -- skipped: an operator skipped it.
  state TEXT NOT NULL CHECK (state IN
    ('waiting','holding','released','superseded','timed_out','skipped')),
  -- Last sign of life of a holder (or waiter); a holder whose heartbeat is
  -- older than 10 minutes stops blocking the group (ADR-0004).
  heartbeat_ms INTEGER NOT NULL,
  -- For superseded rows: the revision that replaced it, named in the
  -- neutral check run. NULL otherwise.
  superseded_by TEXT,
  -- Why an automatic skip happened (superseded, not_current,
  -- queued_timeout, confirmation_timeout); NULL for an operator's skip.
  skipped_reason TEXT,
  -- An imperative run (an operator's raw command) is exempt from the queue
  -- policy on both sides (queue-policy seed): 1 when exempt.
  imperative INTEGER NOT NULL DEFAULT 0 CHECK (imperative IN (0, 1)),
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (group_key, execution_id)
);

-- Claims and supersedes scan one group's live rows in arrival order.
CREATE INDEX serial_queue_by_group ON serial_queue (group_key, state, seq);

CREATE TABLE container_leases (
  -- One row per sandbox (container) id: at most one holder at a time.
  sandbox_id TEXT PRIMARY KEY NOT NULL,
  -- The execution holding the sandbox.
  holder TEXT NOT NULL,
  acquired_ms INTEGER NOT NULL,
  heartbeat_ms INTEGER NOT NULL,
  -- A lease whose expiry passed is stale and may be reclaimed by the next
  -- claimant in the same conditional UPDATE.
  expires_ms INTEGER NOT NULL
);
