-- 0002 webhook_deliveries: which GitHub deliveries Sluice already acted on
--
-- Why: GitHub redelivers (manually, or when our answer was slow), each
-- time with the same X-GitHub-Delivery GUID. A redelivery must create
-- nothing new and answer with the instances the first delivery created.
-- Instance ids are the real dedup (ADR-0001 rule 1: creating an existing
-- id is a no-op); this table short-circuits a redelivery before any object
-- is touched and gives operators an audit trail of what each delivery did.
--
-- Owner: src/store/executions.rs on behalf of src/http/webhook.rs.
-- Replay: the row is written only AFTER every instance was created, so a
-- delivery that died half way is not mistaken for a done one; the insert
-- is INSERT OR IGNORE so two racing deliveries of one GUID both succeed.
-- Deliveries Sluice ignores (events it does not act on) write no row.

CREATE TABLE webhook_deliveries (
  -- X-GitHub-Delivery, a GUID.
  delivery_id TEXT PRIMARY KEY NOT NULL,
  -- X-GitHub-Event and the payload's action ("pull_request", "opened").
  event TEXT NOT NULL,
  action TEXT,
  -- "owner/name".
  repo TEXT,
  -- JSON array of the instance ids this delivery created or found.
  instance_ids_json TEXT NOT NULL,
  -- ms since epoch.
  received_ms INTEGER NOT NULL
);

CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (received_ms);
