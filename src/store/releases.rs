//! The release approvals `release-notes` instances wait on
//! (`migrations/0008_release_notes.sql`, `0011_release_senders.sql`): the
//! index a decision's webhook finds its instance by, what that webhook may
//! send it, and the fence between deciding and superseding. The decisions
//! are `runs::release`'s.

use serde::Deserialize;

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

/// Waiting approvals of one repository read at once: a repository has a
/// handful of unreleased tags waiting at most; older ones past this are
/// left to their own timeout.
pub const WAITING_LISTED_MAX: u32 = 50;
/// Events routing sends one window of a wait from one sender who is not a
/// named approver: a decider needs two at most (a merge of a pull request
/// changed after the proposal, then Approve); anyone else is answered at
/// the first, and more would only cost the wait steps. One to spare.
pub const SENDER_EVENTS_PER_WINDOW_MAX: u32 = 3;
/// Senders who are not named approvers whose events reach one window: each
/// needs write or triage access to press a check run's button or close a
/// pull request, and a release rarely sees more than a handful of them act
/// in one window. Past it, a new sender's event is dropped at the webhook
/// (a named approver's still reaches the wait), so no crowd can spend the
/// instance's steps.
pub const SENDERS_PER_WINDOW_MAX: u32 = 20;

/// The columns an `Approval` is read from.
const APPROVAL_COLUMNS: &str = "instance_id, repo, tag, pr_number, check_run_id, state, \
    superseded_by, superseded_by_sha, deciders, approvers, waiting_since_ms, deadline_ms, \
    decisions_until_ms";

/// One approval row.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Approval {
    pub instance_id: String,
    pub repo: String,
    pub tag: String,
    pub pr_number: i64,
    pub check_run_id: i64,
    pub state: String,
    pub superseded_by: Option<String>,
    /// The commit a push of the same tag named when it superseded this one.
    #[serde(default)]
    pub superseded_by_sha: Option<String>,
    pub deciders: String,
    /// The named approvers, a JSON array of logins; None is anyone with
    /// write access.
    #[serde(default)]
    pub approvers: Option<String>,
    pub waiting_since_ms: i64,
    pub deadline_ms: i64,
    /// Until when a decision GitHub dated inside the window still reaches
    /// the instance (None: the deadline).
    #[serde(default)]
    pub decisions_until_ms: Option<i64>,
}

/// The instance a decision's webhook found waiting, and what routing needs
/// of it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Waiter {
    pub instance_id: String,
    /// Names the window (`release_senders`).
    pub waiting_since_ms: i64,
    pub approvers: Option<String>,
}

impl Waiter {
    /// Whether `login` is one of the approvers the row names, compared as
    /// GitHub compares logins.
    pub fn names(&self, login: &str) -> bool {
        let Some(list) = self.approvers.as_deref() else {
            return false;
        };
        serde_json::from_str::<Vec<String>>(list)
            .is_ok_and(|names| names.iter().any(|n| n.eq_ignore_ascii_case(login)))
    }
}

/// Records (or, on a replan, renews) the instance's waiting approval. A
/// row that already left 'waiting' is not brought back.
pub async fn record(db: &dyn Database, a: &Approval, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO release_approvals (instance_id, repo, tag, pr_number, check_run_id, state, \
           deciders, waiting_since_ms, deadline_ms, updated_ms, approvers, decisions_until_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'waiting', ?6, ?7, ?8, ?9, ?10, ?11) \
         ON CONFLICT (instance_id) DO UPDATE SET pr_number = excluded.pr_number, \
           check_run_id = excluded.check_run_id, deciders = excluded.deciders, \
           waiting_since_ms = excluded.waiting_since_ms, deadline_ms = excluded.deadline_ms, \
           updated_ms = excluded.updated_ms, approvers = excluded.approvers, \
           decisions_until_ms = excluded.decisions_until_ms \
         WHERE release_approvals.state = 'waiting'",
        a.instance_id.as_str(),
        a.repo.as_str(),
        a.tag.as_str(),
        a.pr_number,
        a.check_run_id,
        a.deciders.as_str(),
        a.waiting_since_ms,
        a.deadline_ms,
        now_ms,
        a.approvers.as_deref(),
        a.decisions_until_ms,
    ))
    .await
    .map(|_| ())
}

/// The instance waiting on pull request `number` of `repo` that takes a
/// decision at `now_ms`: any while its window is open; one GitHub dated
/// (`dated`: a merge or close, judged by its date by the instance) until
/// the row's `decisions_until_ms` too.
pub async fn waiting_on_pull(
    db: &dyn Database,
    repo: &str,
    number: u64,
    now_ms: i64,
    dated: bool,
) -> Result<Option<Waiter>, StoreError> {
    let n = i64::try_from(number).unwrap_or(i64::MAX);
    one_waiter(
        db,
        stmt!(
            "SELECT instance_id, waiting_since_ms, approvers FROM release_approvals \
             WHERE repo = ?1 AND pr_number = ?2 AND state = 'waiting' AND (deadline_ms > ?3 \
               OR (?4 = 1 AND COALESCE(decisions_until_ms, deadline_ms) > ?3)) \
             ORDER BY waiting_since_ms DESC LIMIT 1",
            repo,
            n,
            now_ms,
            i64::from(dated),
        ),
    )
    .await
}

/// The instance waiting on check run `id` of `repo` whose window is still
/// open at `now_ms`, if one does (a press has no date: after the deadline
/// it decides nothing).
pub async fn waiting_on_check_run(
    db: &dyn Database,
    repo: &str,
    id: u64,
    now_ms: i64,
) -> Result<Option<Waiter>, StoreError> {
    let id = i64::try_from(id).unwrap_or(i64::MAX);
    one_waiter(
        db,
        stmt!(
            "SELECT instance_id, waiting_since_ms, approvers FROM release_approvals \
             WHERE repo = ?1 AND check_run_id = ?2 AND state = 'waiting' AND deadline_ms > ?3 \
             ORDER BY waiting_since_ms DESC LIMIT 1",
            repo,
            id,
            now_ms,
        ),
    )
    .await
}

async fn one_waiter(db: &dyn Database, s: super::Stmt) -> Result<Option<Waiter>, StoreError> {
    let rows: Vec<Waiter> = decode(db.all(s).await?)?;
    Ok(rows.into_iter().next())
}

/// Counts one event of `sender` for the window of `w` and says whether
/// routing may send it: at most `SENDER_EVENTS_PER_WINDOW_MAX` per sender
/// and `SENDERS_PER_WINDOW_MAX` senders per window. One conditional
/// statement: two deliveries at once cannot both take the last place.
pub async fn admit(db: &dyn Database, w: &Waiter, sender: &str) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "INSERT INTO release_senders (instance_id, window_since_ms, sender, events) \
             SELECT ?1, ?2, ?3, 1 WHERE (SELECT COUNT(*) FROM release_senders \
               WHERE instance_id = ?1 AND window_since_ms = ?2) < ?5 \
             OR EXISTS (SELECT 1 FROM release_senders \
               WHERE instance_id = ?1 AND window_since_ms = ?2 AND sender = ?3) \
             ON CONFLICT (instance_id, window_since_ms, sender) \
             DO UPDATE SET events = events + 1 WHERE release_senders.events < ?4",
            w.instance_id.as_str(),
            w.waiting_since_ms,
            sender.to_ascii_lowercase(),
            SENDER_EVENTS_PER_WINDOW_MAX,
            SENDERS_PER_WINDOW_MAX,
        ))
        .await?;
    Ok(changed == 1)
}

/// The waiting approvals of `repo`, oldest first.
pub async fn waiting_in(db: &dyn Database, repo: &str) -> Result<Vec<Approval>, StoreError> {
    decode(
        db.all(stmt!(
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM release_approvals \
                 WHERE repo = ?1 AND state = 'waiting' ORDER BY waiting_since_ms LIMIT ?2"
            ),
            repo,
            WAITING_LISTED_MAX,
        ))
        .await?,
    )
}

/// One instance's approval.
pub async fn get(db: &dyn Database, instance_id: &str) -> Result<Option<Approval>, StoreError> {
    let rows: Vec<Approval> = decode(
        db.all(stmt!(
            format!("SELECT {APPROVAL_COLUMNS} FROM release_approvals WHERE instance_id = ?1"),
            instance_id,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next())
}

/// Moves a waiting approval to `state` ('publishing', 'rejected',
/// 'timed_out'); false when it is no longer waiting (superseded first).
pub async fn claim(
    db: &dyn Database,
    instance_id: &str,
    state: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "UPDATE release_approvals SET state = ?2, updated_ms = ?3 \
             WHERE instance_id = ?1 AND state = 'waiting'",
            instance_id,
            state,
            now_ms,
        ))
        .await?;
    Ok(changed == 1)
}

/// Supersedes a waiting approval by the tag `by` (a newer tag, or the
/// same tag pushed again at the commit `by_sha`); false when it is no
/// longer waiting (it was decided first: a publishing one is never
/// touched).
pub async fn supersede(
    db: &dyn Database,
    instance_id: &str,
    by: &str,
    by_sha: Option<&str>,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "UPDATE release_approvals SET state = 'superseded', superseded_by = ?2, \
               superseded_by_sha = ?4, updated_ms = ?3 \
             WHERE instance_id = ?1 AND state = 'waiting'",
            instance_id,
            by,
            now_ms,
            by_sha,
        ))
        .await?;
    Ok(changed == 1)
}

/// A waiting approval as the waiting list shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Asked {
    pub instance_id: String,
    /// Who may decide, in words.
    pub deciders: String,
    /// When the window ends (a merge GitHub dated before it may still
    /// arrive a little later), ms since the epoch.
    pub deadline_ms: i64,
}

/// Who each of `ids` waits for and until when, for those with a waiting
/// approval (one statement for a page of executions).
pub async fn deciders_of(db: &dyn Database, ids: &[&str]) -> Result<Vec<Asked>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|n| format!("?{n}")).collect();
    let sql = format!(
        "SELECT instance_id, deciders, deadline_ms FROM release_approvals \
         WHERE state = 'waiting' AND instance_id IN ({})",
        marks.join(", ")
    );
    let params = ids.iter().map(|id| super::Param::from(*id)).collect();
    decode(db.all(super::Stmt::new(sql, params)).await?)
}

/// Deletes at most `limit` approvals decided (left 'waiting') before
/// `before_ms`: the retention purge. A waiting one is its instance's index
/// and stays while the instance waits. The sender counts of decided
/// approvals (and of a waiting one's past windows) routing no longer reads
/// go in the same batch, at most `limit` of them.
pub async fn purge_decided(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    let changes = db
        .batch(vec![
            stmt!(
                "DELETE FROM release_senders WHERE rowid IN (SELECT s.rowid \
                 FROM release_senders s LEFT JOIN release_approvals a \
                   ON a.instance_id = s.instance_id \
                 WHERE a.instance_id IS NULL OR a.state <> 'waiting' \
                   OR a.waiting_since_ms <> s.window_since_ms LIMIT ?1)",
                limit,
            ),
            stmt!(
                "DELETE FROM release_approvals WHERE instance_id IN (SELECT instance_id \
                 FROM release_approvals WHERE state <> 'waiting' AND updated_ms < ?1 \
                 ORDER BY updated_ms LIMIT ?2)",
                before_ms,
                limit,
            ),
        ])
        .await?;
    Ok(changes.iter().sum())
}
