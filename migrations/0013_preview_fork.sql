-- 0013 preview fork: whether a live preview's head is in a fork
--
-- Why: a fork's code must never receive an environment's secrets (README,
-- "Previews"; ADR-0012 rule 7). A preview is torn down not only by its
-- close's teardown, whose input says whether the head is a fork, but by
-- the sweep's reconcile, the per-repository cap's eviction and an
-- operator's Tear down, which know the preview only from this index.
-- Without the flag those teardowns were built as a same-repository one and
-- would run the fork's `teardown` command with the environment's secrets.
-- `fork` is that flag: every teardown of a row with `fork = 1` gets no
-- secret (and is skipped when the environment exports any).
--
-- Owner: `src/store/previews.rs` (SQL), `src/runs/run/preview/` (the runs
-- that write and read it).
-- Replay: `fork` is written with the rest of the row in the preview's
-- `started` upsert; a replayed step writes the same value.
-- Backfill: a row whose last preview execution is still in the index takes
-- that execution's input's `fork`; a row whose execution was purged is not
-- known to be a same-repository preview, so it is treated as a fork (its
-- teardown gets no secret; a push to it previews it again and records the
-- flag afresh).
-- NULLs: none (0 or 1).
ALTER TABLE previews ADD COLUMN fork INTEGER NOT NULL DEFAULT 0 CHECK (fork IN (0, 1));

UPDATE previews SET fork = CASE
  WHEN NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = previews.execution_id) THEN 1
  WHEN (SELECT json_extract(e.input_json, '$.fork') FROM executions e
        WHERE e.id = previews.execution_id) = 1 THEN 1
  ELSE 0
END;
