-- 0006 dispatch: the signatures of Action-mode dispatches already used
--
-- Why: `POST /v1/dispatch` is authenticated by an HMAC (DISPATCH_SECRET)
-- over a timestamp and the body, valid 5 minutes. Within that window a
-- captured request could be sent again; each signature is recorded when
-- its run is started, and a second request with it is refused (401). The
-- sweep deletes rows older than the window: a request that old is refused
-- by its timestamp alone.
CREATE TABLE dispatch_signatures (
  -- The hex HMAC-SHA256 of "<timestamp>.<body>": one per request.
  signature TEXT PRIMARY KEY,
  -- The instance the request started, for the operator reading the table.
  instance_id TEXT NOT NULL,
  -- When it was used; the purge deletes rows older than the window.
  used_ms INTEGER NOT NULL
);

CREATE INDEX dispatch_signatures_used ON dispatch_signatures (used_ms);
