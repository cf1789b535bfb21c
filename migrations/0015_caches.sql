-- 0015 caches: dependency caches a job saved, by repository, scope and key
--
-- Why: a job's `cache = [{ paths, key_files }]` (README, "Pipelines")
-- restores its dependencies from R2 instead of installing them again. The
-- key is derived from the key files' content and the image class; a run
-- restores the exact key, else the newest entry with the same prefix (the
-- same paths and class, another lockfile), and saves after its command
-- passed when the exact key missed. Who may read an entry is its scope, as
-- GitHub scopes Actions caches (`runs::kit::inputs::CacheScope`): the
-- default branch's (`branch:<default>`) are every run's; a pull request's
-- (`pr:<n>`) its own; a fork's pull request's (`fork-pr:<n>`) its own and
-- nobody else's, so nothing a fork writes reaches a same-repository run or
-- a deploy. R2 holds the bytes; this index is how a run finds an entry it
-- may read without listing R2, and how a repository's entries are kept
-- under its size cap, least recently used first.
--
-- Owner: `src/store/caches.rs` (SQL), `src/runs/kit/caches.rs` (the steps
-- that read and write it).
-- Replay: a save inserts its row only if none is there (the first save of
-- a key wins, as GitHub's); a replayed restore only marks the row used.
CREATE TABLE caches (
  repo TEXT NOT NULL,
  -- Who may read it (`branch:main`, `pr:7`, `fork-pr:9`).
  scope TEXT NOT NULL,
  -- The full key (`<prefix><digest of the key files>`).
  key TEXT NOT NULL,
  -- The key without the key files' digest: the prefix fallback's match.
  prefix TEXT NOT NULL,
  -- Where R2 keeps the archive (`caches/<repo>/<scope>/<key>.tar.gz`).
  r2_key TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  files INTEGER NOT NULL,
  -- The archive's SHA-256: the sandbox refuses to unpack other bytes.
  sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  -- Last restored (or saved): the least recently used go first.
  used_ms INTEGER NOT NULL,
  PRIMARY KEY (repo, scope, key)
);
CREATE INDEX caches_by_prefix ON caches (repo, prefix, created_ms);
CREATE INDEX caches_by_use ON caches (repo, used_ms);
