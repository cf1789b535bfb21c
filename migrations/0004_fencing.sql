-- 0004 fencing: the processes gate holders spawn, and which instance owns each gate row
--
-- Why: "never two deploys at once" is about processes, not rows. A holder
-- that stalls past the heartbeat bound is taken over while the process it
-- spawned may still run; an operator's restart or terminate ends the
-- instance while its process runs on. So every process a gated run spawns
-- is recorded here, in the same statement that verifies (the fence) that
-- its execution still holds its group and that no other live process of
-- the group or of the sandbox exists. A holder spawns only when that
-- statement inserted its row; a taker waits for its predecessor's process
-- to end before its own fence passes; a process is marked ended only when
-- its exit was seen (or its kill confirmed), so releasing a group never
-- leaves a live process behind unseen.
--
-- serial_queue.instance_id: the instance a row belongs to (execution ids
-- carry a generation suffix, "id.g2"), so the sweep can join gate rows to
-- `executions` by an indexed column: to find waiters whose instance is live
-- (queued, running or waiting; a paused or finished one does not block the
-- waiters behind it) and finished instances that still hold rows.
-- This replaces 0003's rule for waiters: a waiter no longer polls, so its
-- `heartbeat_ms` is only the time of its last claim, and a waiter stops
-- blocking the ones behind it when its instance is not live, not after a
-- silence (0003's comment says 10 minutes; the constant it meant was 45).
--
-- Owner: src/gates/fence.rs (sandbox_processes), src/gates/serial.rs.
-- Replay: the fence is an upsert keyed by the process id (instance,
-- command step, generation), so a replayed fence finds its own row; marking
-- a process ended is idempotent.
-- NULLs: group_key is NULL for a process of an ungrouped run (a check);
-- ended_ms is NULL while live. serial_queue.instance_id is backfilled below
-- for rows written before this migration and always set after it.
-- Times are ms since the Unix epoch (UTC) everywhere.

CREATE TABLE sandbox_processes (
  -- The sandbox agent's process id (derived from the instance, the command
  -- step and the generation, so a replayed spawn finds its process).
  process_id TEXT PRIMARY KEY NOT NULL,
  -- The run instance that spawned it.
  instance_id TEXT NOT NULL,
  -- Its gate execution id (the instance id with its generation suffix).
  execution_id TEXT NOT NULL,
  -- The serial group its execution held when it was fenced; NULL for runs
  -- that serialize nothing.
  group_key TEXT,
  -- Where it runs: the sandbox (container) id the agent is reached by.
  sandbox_id TEXT NOT NULL,
  -- live: fenced (it may be running or about to start); ended: its exit was
  -- observed, its kill confirmed, or the sandbox does not know it.
  state TEXT NOT NULL CHECK (state IN ('live','ended')),
  -- ms of the fence that allowed the spawn.
  fenced_ms INTEGER NOT NULL,
  -- ms after which the agent's own timeout has ended it for certain (fence
  -- time + the command's timeout + the agent's kill margin): a sandbox that
  -- never answers cannot block its group past this.
  deadline_ms INTEGER NOT NULL,
  -- ms when it was marked ended; the retention purge goes by it.
  ended_ms INTEGER,
  CHECK ((state = 'ended') = (ended_ms IS NOT NULL)),
  CHECK (fenced_ms <= deadline_ms)
);

-- The fence looks for live processes of a group, and of a sandbox.
CREATE INDEX sandbox_processes_by_group ON sandbox_processes (group_key, state);
CREATE INDEX sandbox_processes_by_sandbox ON sandbox_processes (sandbox_id, state);
-- Kill-before-release and finalize read an instance's live processes.
CREATE INDEX sandbox_processes_by_instance ON sandbox_processes (instance_id, state);
-- The retention purge.
CREATE INDEX sandbox_processes_by_ended ON sandbox_processes (ended_ms);

ALTER TABLE serial_queue ADD COLUMN instance_id TEXT;
UPDATE serial_queue SET instance_id = CASE WHEN instr(execution_id, '.') > 0
  THEN substr(execution_id, 1, instr(execution_id, '.') - 1) ELSE execution_id END;
CREATE INDEX serial_queue_by_instance ON serial_queue (instance_id, state);
