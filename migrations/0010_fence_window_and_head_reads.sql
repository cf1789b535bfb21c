-- 0010 fence window and head reads: a process counts as live until its
-- sandbox says otherwise; a waiter yields only to an arrival that knew the head
--
-- sandbox_processes.start_by_ms. Why: 0004 let a process stop blocking its group once `deadline_ms`
-- passed, on the theory that the agent's own timeout had ended it by then.
-- The deadline was computed before the checkout, while the agent's timeout
-- starts when the process starts, so a slow checkout (up to 10 minutes per
-- git command) moved the real end past the recorded deadline, and a taker
-- could start its deploy beside one still running. Now nothing is marked
-- ended because a clock passed: a process blocks until its exit is seen,
-- its kill is confirmed, or its sandbox does not know it. "Does not know
-- it" needs a bound of its own, since a process is fenced a moment before
-- it is started: the fence records `start_by_ms`, the agent refuses to
-- start a new process past it (409 `start_window_passed`), so a process
-- its sandbox does not know after `start_by_ms` (plus the clock skew
-- allowed between the Worker and the sandbox) never runs.
--
-- Owner of that column: src/gates/fence.rs. `deadline_ms` stays as what it now is: when
-- the agent's timeout ends the process at the latest (fenced after the
-- checkout, immediately before the start), shown to operators; it no
-- longer decides anything.
-- NULLs: start_by_ms is NULL for rows fenced before this migration; for
-- them "unknown to the sandbox" still means ended, as it did.
-- Times are ms since the Unix epoch (UTC).

ALTER TABLE sandbox_processes ADD COLUMN start_by_ms INTEGER;

-- serial_queue.judged_current. Why: a waiter yields at its claim to a newer
-- row that has held the group (0003: running the older revision would undo
-- the newer one). "Newer" was arrival order, which is revision order only
-- when the arrival knew the branch head: an older commit re-queued later (a
-- restart, a re-run) whose head read failed arrives after newer waiters
-- without being newer, and the waiters yielded to it, so the head's deploy
-- never ran. 1: the arrival's head read named its own revision, or the run
-- names no current revision (arrival order is then the rank); 0: the head
-- read failed, so the row makes nobody yield (its dequeue's read judges
-- it). Owner: src/gates/serial.rs.
-- Backfill: rows written before this migration keep the old rule (1).

ALTER TABLE serial_queue ADD COLUMN judged_current INTEGER NOT NULL DEFAULT 1
  CHECK (judged_current IN (0, 1));

-- serial_queue.current_read_ms. Why: even an arrival that knew the head is
-- newer than a waiter only if it read the head after that waiter arrived (a
-- read made before, delayed on its way to the enqueue, ranks nothing). ms
-- since the epoch of when the arrival asked for the head; a waiter yields
-- at its claim only to a newer row whose read is no older than its own
-- arrival. NULL: the run names no current revision (arrival order ranks)
-- or the row predates this migration (the old rule).

ALTER TABLE serial_queue ADD COLUMN current_read_ms INTEGER;
