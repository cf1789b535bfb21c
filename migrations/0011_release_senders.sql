-- 0011 release senders: what routing may send a release's wait, and what
-- superseded it
--
-- Why: a release waits for its deciders (ADR-0001 rule 3), and every event
-- a webhook routes to it is a journaled step of its instance, which the
-- engine caps (10,000 by default). People who may not decide must not be
-- able to spend that budget, nor the wait's rounds: routing (the webhook,
-- `http::webhook`) forwards each sender's events to a window at most a
-- bounded number of times and from a bounded number of senders, except a
-- named approver's (`store::releases::admit`, one conditional statement).
-- A merge or close is dated by GitHub in its signed payload, so it may
-- reach Sluice after the deadline and still decide: `decisions_until_ms`
-- says until when routing still forwards such dated decisions (a press has
-- no date and is routed only before `deadline_ms`). A tag pushed again at
-- another commit supersedes the earlier push's wait: `superseded_by_sha`
-- names the commit it now names.
--
-- Owner: `src/store/releases.rs` (SQL), `src/runs/release.rs` (decisions),
-- `src/http/webhook.rs` (routing).
-- Replay: the instance writes `approvers` and `decisions_until_ms` in the
-- same upsert as the rest of its row; `admit` counts a delivery's event
-- when it routes it, and a delivery is recorded only after its events were
-- sent, so a failed delivery GitHub sends again may count twice (it stays
-- within the bound).
-- NULLs: `approvers` NULL is anyone with write access (and rows written
-- before this migration: routing then bounds every sender alike);
-- `decisions_until_ms` NULL (rows written before this migration) is the
-- deadline itself; `superseded_by_sha` is set only by a same-tag push.
ALTER TABLE release_approvals ADD COLUMN approvers TEXT;
-- ms since the epoch.
ALTER TABLE release_approvals ADD COLUMN decisions_until_ms INTEGER;
ALTER TABLE release_approvals ADD COLUMN superseded_by_sha TEXT;

-- Events routed to one window of a wait, per sender (lowercase login, as
-- GitHub compares them). A window is named by when it started
-- (`release_approvals.waiting_since_ms`): a replan starts a fresh count.
-- Purged with decided approvals.
CREATE TABLE release_senders (
  instance_id TEXT NOT NULL,
  -- ms since the epoch.
  window_since_ms INTEGER NOT NULL,
  sender TEXT NOT NULL,
  events INTEGER NOT NULL CHECK (events >= 1),
  PRIMARY KEY (instance_id, window_since_ms, sender)
);
