-- 0009 costs: what each execution cost, in billed units
--
-- Why: operators and `npm run bench` need what a run costs on Cloudflare's
-- bill, counted as the work happened (src/cost): requests to and busy time
-- of the instance's Durable Object, the rows its own storage read and
-- wrote, D1 statements and rows, R2 operations by class, GitHub API calls
-- and sandbox time. `GET /v1/executions/{id}` shows them with dollars;
-- `GET /v1/costs` sums them per repository.
--
-- Owner: src/store/executions.rs (SQL) on behalf of src/engine/executor.rs,
-- which writes them in every mirror batch (no statement of their own).
-- Column names are `cost::CostUnits`'s fields, so a row decodes into it.

ALTER TABLE executions ADD COLUMN do_requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN do_active_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN do_rows_read INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN do_rows_written INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN d1_statements INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN d1_rows_read INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN d1_rows_written INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN r2_class_a INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN r2_class_b INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN github_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN sandbox_ms INTEGER NOT NULL DEFAULT 0;
