-- 0014 artifacts: the files a pipeline job uploaded when its command passed
--
-- Why: a job's `artifacts = ["dist/**"]` (README, "Pipelines") packs the
-- matching files of its workspace into one gzipped tar in R2 when its
-- command passes; the jobs that `need` it unpack it into their workspace
-- before their command, and the check summary, the dashboard and the API
-- list it with a signed download link. R2 holds the bytes; this index is
-- how a dependent finds the archive of the unit it needs (by the unit's
-- instance id, which its parent passes it), how a page lists an
-- execution's artifacts without listing R2, and what the retention sweep
-- deletes.
--
-- Owner: `src/store/artifacts.rs` (SQL), `src/runs/kit/artifacts.rs` (the
-- steps that write and read it).
-- Replay: the save step upserts its row by instance id: a replayed save
-- writes the same key with the archive it made again.
CREATE TABLE artifacts (
  -- The unit that uploaded it: one archive per unit (its job's patterns).
  instance_id TEXT PRIMARY KEY,
  -- The job it belongs to, as the dependents' `needs` name it.
  job TEXT NOT NULL,
  -- The unit's check run name (`sluice/build (2/4)`): how it is listed.
  label TEXT NOT NULL,
  -- Where R2 keeps the archive (`artifacts/<instance_id>.tar.gz`).
  r2_key TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  files INTEGER NOT NULL,
  -- The archive's SHA-256: the sandbox refuses to unpack other bytes.
  sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
-- The retention sweep deletes the oldest first.
CREATE INDEX artifacts_by_created ON artifacts (created_ms);
