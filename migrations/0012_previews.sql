-- 0012 previews: the live pull-request previews of each repository
--
-- Why: a pull request's preview is an entity lifecycle (ADR-0001 rule 4):
-- a short instance per event (a head to deploy, a close to tear down), the
-- authoritative state in GitHub (the pull request and its deployments).
-- This table is the index of which previews Sluice believes are live, so
-- that the cron sweep can ask GitHub about each (a close event GitHub never
-- delivered still tears the preview down), a repository's live previews
-- can be capped, and the dashboard can list them without waking instances.
--
-- Owner: `src/store/previews.rs` (SQL), `src/runs/run/preview/` (the runs
-- that write it), `src/runs/edge/sweep.rs` (the reconcile that reads it).
-- Replay: every write is an upsert or a conditional update keyed by
-- (repo, pr); a replayed step writes the same row again. A teardown marks
-- the row `torn_down` only once its command succeeded; a new head of a
-- reopened pull request marks it `live` again.
-- NULLs: `url` is NULL until a preview command reported one; `result` is
-- NULL while the first deploy of the row has not ended.
CREATE TABLE previews (
  repo TEXT NOT NULL,
  pr INTEGER NOT NULL,
  installation_id INTEGER NOT NULL,
  -- where `[preview]` is read, and the pull request's head branch (the
  -- environment's grant matches it): what a teardown the sweep starts needs
  default_branch TEXT NOT NULL,
  head_branch TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('live', 'torn_down')),
  -- the head of the last preview deploy that started
  sha TEXT NOT NULL,
  -- the environment URL the last successful deploy reported
  url TEXT,
  -- how the last deploy ended: a verdict's conclusion ('success', 'failure', ...)
  result TEXT,
  -- the last preview execution
  execution_id TEXT NOT NULL,
  -- ms since epoch: when a preview of this pull request last started or ended
  updated_ms INTEGER NOT NULL,
  -- ms since epoch: when the sweep last asked GitHub whether the pull request is open
  checked_ms INTEGER NOT NULL,
  PRIMARY KEY (repo, pr)
);
CREATE INDEX previews_live ON previews (state, checked_ms);
