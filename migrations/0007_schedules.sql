-- 0007 schedules: `[[schedule]]` of each repository's default branch, and
-- the slots already fired
--
-- Why: the cron sweep must know which repositories have schedules without
-- reading every installed repository's config each minute. The `schedules`
-- run (started by every push to a default branch) reads `.sluice.toml`
-- there and records its schedules here; the sweep reads this table.
CREATE TABLE repo_schedules (
  repo TEXT PRIMARY KEY NOT NULL,
  -- What a scheduled run needs to talk to GitHub and read its policy.
  installation_id INTEGER NOT NULL,
  default_branch TEXT NOT NULL,
  -- The schedules as `runs::schedule::Scheduled` JSON ('[]': none).
  schedules_json TEXT NOT NULL,
  -- Why the last read config was refused (the previous schedules are kept,
  -- so a typo does not silently stop the nightly build); NULL when valid.
  error TEXT,
  -- When the config was read: a slower sync of an older push never
  -- overwrites a newer read.
  read_ms INTEGER NOT NULL
);

-- One row per slot a schedule reached: a slot fires once, however many
-- times the sweep ticks within it and however late it runs.
CREATE TABLE schedule_slots (
  -- "<repo>:<schedule identity>:<slot, Unix seconds>".
  slot_key TEXT PRIMARY KEY NOT NULL,
  repo TEXT NOT NULL,
  -- 'claimed' (the create is recorded, the instance may not exist yet: the
  -- next sweep creates it from create_json), 'created', or 'live' (an
  -- instance of the same run and commit was already live: none started).
  state TEXT NOT NULL CHECK (state IN ('claimed','created','live')),
  instance_id TEXT NOT NULL,
  create_json TEXT NOT NULL,
  fired_ms INTEGER NOT NULL
);

CREATE INDEX schedule_slots_fired ON schedule_slots (fired_ms);
