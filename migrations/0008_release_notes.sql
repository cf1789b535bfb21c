-- 0008 release notes: the release approvals a `release-notes` instance
-- waits on, by pull request and check run
--
-- Why: a release waits for a named decider (ADR-0001 rule 3). The human's
-- answer arrives as a webhook about a pull request (merged or closed) or a
-- check run (Approve, Reject, Re-run), and the webhook must find the one
-- instance that waits on it without scanning instances: this table is that
-- index. The webhook reads it and sends the event; it creates nothing
-- (ADR-0001 rule 4).
--
-- It is also the fence between a decision and a supersession: every change
-- of `state` is one conditional UPDATE from 'waiting' whose result
-- decides, so an instance that claimed 'publishing' is never superseded
-- and one superseded never publishes. 'ended': the instance ended from
-- outside (terminated, a crash loop) while it waited.
--
-- Owner: `src/store/releases.rs` (SQL), `src/runs/release.rs` (decisions).
-- Replay: the instance inserts its row in a journaled step with
-- ON CONFLICT DO UPDATE of what a replan changes, so a replayed insert is
-- the same row. NULLs: only `superseded_by`, set with 'superseded'.
CREATE TABLE release_approvals (
  -- The waiting instance: one row per instance.
  instance_id TEXT PRIMARY KEY NOT NULL,
  repo TEXT NOT NULL,
  tag TEXT NOT NULL,
  -- The approval pull request and the `sluice/release-notes` check run.
  pr_number INTEGER NOT NULL,
  check_run_id INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN
    ('waiting','publishing','rejected','timed_out','superseded','ended')),
  -- The newer tag that superseded this one.
  superseded_by TEXT,
  -- Who may decide, in words ("@ana, @bo", or "someone with write access").
  deciders TEXT NOT NULL,
  -- When the current window started and ends (a replan restarts it), ms
  -- since the epoch.
  waiting_since_ms INTEGER NOT NULL,
  deadline_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  CHECK ((state = 'superseded') = (superseded_by IS NOT NULL))
);

CREATE INDEX release_approvals_pull ON release_approvals (repo, pr_number);
CREATE INDEX release_approvals_check_run ON release_approvals (repo, check_run_id);
CREATE INDEX release_approvals_waiting ON release_approvals (repo, state);
