-- 0005 list pages: indexes for the cursor-paginated lists
--
-- Why: every list of the API and the dashboard is paged with a cursor
-- (issue 13): executions newest first by (created_ms, id), deliveries by
-- (received_ms, delivery_id). Without a filter, or with one no other index
-- covers (status, a time range), an executions page was a scan and sort of
-- the whole table; with this index it is a range scan of one page. The
-- repository and entity filters keep using 0001's indexes.
--
-- Owner: src/store/executions.rs (list_page, deliveries_page).
-- Replay: indexes only; applying this file changes no row.
-- NULLs and backfill: none (both columns are NOT NULL; an index is built
-- over the rows already there).

CREATE INDEX executions_by_created ON executions (created_ms, id);
-- Deliveries already have webhook_deliveries_by_time (received_ms); the
-- key breaks ties within one ms, so a page boundary is exact.
CREATE INDEX webhook_deliveries_by_time_key ON webhook_deliveries (received_ms, delivery_id);
DROP INDEX webhook_deliveries_by_time;
