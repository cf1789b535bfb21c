//! The `release-notes` run: on a pushed tag that `[release_notes] tags` on
//! the default branch selects, compose notes from the commits since the
//! previous matching tag, propose them in an approval pull request, ask a
//! named decider on check run `sluice/release-notes` (`action_required`,
//! Approve and Reject), and wait, bounded, for the decision (ADR-0001 rule
//! 3: the decider is `[release_notes] approvers`, or anyone with write
//! access when none are named; the timeout is `confirmation_timeout`).
//!
//! The run reads as its steps: read config, set its ceiling, then inside
//! its check run: compose notes, open the pull request, enter waiting
//! (deadline, the approval's index row, the buttons, supersede older
//! waiting tags), then wait for a decision: merge or Approve publishes the
//! release, close or Reject ends it `rejected`, Re-run regenerates the
//! notes and restarts the window, and the window's end skips it
//! `confirmation_timeout`. Every change of the approval's state is one
//! conditional statement (`store::releases`), so a decision and a
//! supersession never both win.
//!
//! The wait's bounds: a decider's answers count toward `ROUNDS_MAX`;
//! anyone else's are answered once per window and cost no round, and
//! routing sends a window only `SENDER_EVENTS_PER_WINDOW_MAX` events of
//! each of `SENDERS_PER_WINDOW_MAX` such senders, so the steps a wait can
//! take stay within the engine's cap (checked below at compile time). A
//! merge or close GitHub dated inside the window decides even when it
//! arrives after the deadline, within `decision_grace_ms`.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

pub mod notes;

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::{Ctx, RunError, RunOutcome, Status, StepConfig};
use crate::gates::policy::SkipReason;
use crate::github::releases::{NewPull, PullInfo, Tag};
use crate::github::{CheckAction as Button, CheckConclusion, CheckOutput, CheckRunUpdate};
use crate::limits::{RUN_DURATION_MS_MAX, STEPS_PER_RUN_MAX_DEFAULT};
use crate::store::releases::{
    self, Approval, SENDERS_PER_WINDOW_MAX, SENDER_EVENTS_PER_WINDOW_MAX,
};

use crate::runs::kit::approval::{may_decide_as, Deciders, RELEASE_EVENT, RELEASE_WAIT};
use crate::runs::kit::config::{
    release_window_ms, ReleaseNotesConfig, RepoConfig, RELEASE_WINDOW_MS_DEFAULT,
    RELEASE_WINDOW_MS_MAX,
};
use crate::runs::kit::inputs::{Decision, ReleaseInput};
use crate::runs::kit::notify::{self, AutoSkipped};
use crate::runs::kit::report::CheckRunOf;
use crate::runs::kit::report::{
    details_url, github_failure, github_step, reported, CheckTarget, Verdict,
};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::{FailureTag, SkipTag};
use crate::runs::kit::{configured_at, unless_ignored, Configured, RunEnv};
use notes::NotesInput;

pub const RELEASE_CHECK_NAME: &str = "sluice/release-notes";
/// Where approval pull requests live: `sluice/release-notes/<tag>-<push>`,
/// one branch per push of a tag (`branch_of`).
pub const BRANCH_PREFIX: &str = "sluice/release-notes/";
/// Hex digits naming a push in its branch: enough that two pushes of one
/// tag never share a branch.
const BRANCH_PUSH_HEX_CHARS: usize = 8;
/// The file an approval pull request adds: `release-notes/<tag>.md`.
const NOTES_DIR: &str = "release-notes";
/// What a release may take besides its wait: composing notes, opening the
/// pull request, publishing.
const RELEASE_BUDGET_MS: i64 = 3600 * 1000;
/// A decider's answers one instance takes before it stops listening (a
/// replan, a merge of a changed pull request; an approval or a rejection
/// ends the wait at once): a decision that never comes ends at the window.
/// Anyone else's events cost no round: routing bounds them.
const ROUNDS_MAX: u32 = 50;
/// How long after its deadline a wait still takes a merge or close GitHub
/// dated inside the window (its signed `merged_at` / `closed_at`): GitHub
/// delivers within seconds and never retries a failed delivery by itself,
/// so an hour covers its own delayed deliveries and a redelivery by an
/// operator who saw one fail, while an unanswered release stays open at
/// most that long past the window it announced. Never longer than the
/// window itself (`decision_grace_ms`): a short window stays short.
pub const DECISION_GRACE_MS_MAX: i64 = 3600 * 1000;
/// What a release needs once its wait ends (claim, read the tag, publish,
/// announce, conclude: a few GitHub calls and their retries): the wait
/// stops listening this long before the run's ceiling.
const CLOSING_MS: i64 = 10 * 60 * 1000;
/// Windows one instance opens: the first, and one per replan (a decider's
/// round).
const WINDOWS_MAX: u32 = 1 + ROUNDS_MAX;
/// Events one instance consumes at most: every bounded sender's in every
/// window, a decider's rounds, and one wake (a supersession).
const EVENTS_MAX: u32 =
    WINDOWS_MAX * SENDERS_PER_WINDOW_MAX * SENDER_EVENTS_PER_WINDOW_MAX + ROUNDS_MAX + 1;
/// Steps a window's bounded senders cost at most: a sender's first event
/// its wait, the decider check and one answer; each later one its wait
/// only (the instance remembers whom it answered in the window).
const STEPS_PER_WINDOW_MAX: u32 = SENDERS_PER_WINDOW_MAX * (2 + SENDER_EVENTS_PER_WINDOW_MAX);
/// Steps a decider's round costs that does not end the wait: its wait, the
/// decider check, and a replan (its window, the ceiling, the notes, the
/// pull request, the deadline, the asking check run).
const STEPS_PER_ROUND_MAX: u32 = 8;
/// Steps besides the wait (config, ceiling, check run, notes, pull
/// request, window, supersession, the verdict and its notification): far
/// fewer than this.
const STEPS_OUTSIDE_WAIT_MAX: u32 = 50;
/// Pull requests read for one release's notes: beyond it the rest are
/// listed by their commits.
const PULLS_READ_MAX: usize = 100;

const _: () = assert!(
    RELEASE_WINDOW_MS_MAX + DECISION_GRACE_MS_MAX + RELEASE_BUDGET_MS <= RUN_DURATION_MS_MAX
);
const _: () = assert!(CLOSING_MS < RELEASE_BUDGET_MS);
// No flood of events can exhaust the engine's steps before the window ends.
const _: () = assert!(
    WINDOWS_MAX * STEPS_PER_WINDOW_MAX + ROUNDS_MAX * STEPS_PER_ROUND_MAX + STEPS_OUTSIDE_WAIT_MAX
        <= STEPS_PER_RUN_MAX_DEFAULT
);
const _: () = assert!(RELEASE_WINDOW_MS_DEFAULT <= RELEASE_WINDOW_MS_MAX);

/// How long past its deadline a window of `window_ms` still takes a dated
/// decision (`DECISION_GRACE_MS_MAX`, at most the window itself).
pub fn decision_grace_ms(window_ms: i64) -> i64 {
    window_ms.clamp(0, DECISION_GRACE_MS_MAX)
}

pub const APPROVE: Button = Button {
    label: "Approve",
    description: "Publish the release with these notes",
    identifier: "release-approve",
};
pub const REJECT: Button = Button {
    label: "Reject",
    description: "Do not publish this release",
    identifier: "release-reject",
};

/// The `release-notes` run.
pub struct ReleaseNotesRun;

#[async_trait(?Send)]
impl Run for ReleaseNotesRun {
    const NAME: RunName = RunName::new("release-notes");
    const CHECK_RUN: Option<&'static str> = Some(RELEASE_CHECK_NAME);
    const GATED: bool = false;
    type Input = ReleaseInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &ReleaseInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }

    fn check_run(&self, input: &ReleaseInput) -> Option<CheckRunOf> {
        Some(CheckRunOf {
            name: RELEASE_CHECK_NAME.into(),
            installation_id: input.installation_id,
            repo: input.repo.clone(),
            sha: input.sha.clone(),
        })
    }

    /// Ended from outside while it waited: its row leaves the index, its
    /// pull request is closed with a comment, and a check run says so (the
    /// asking one is completed and cannot change). Best effort.
    async fn abandoned(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &ReleaseInput,
        status: Status,
    ) {
        let now = env.clock.now_ms();
        let Ok(Some(row)) = releases::get(env.db, instance_id).await else {
            return;
        };
        if !matches!(
            releases::claim(env.db, instance_id, "ended", now).await,
            Ok(true)
        ) {
            return;
        }
        let (inst, repo) = (input.installation_id, input.repo.as_str());
        let why = format!(
            "The release run of `{}` ended {} before anyone decided: nothing was released.",
            input.tag,
            status.as_str()
        );
        let pr = u64::try_from(row.pr_number).unwrap_or_default();
        let marker = format!("sluice:{instance_id}:ended");
        let _ = env.github.comment_once(inst, repo, pr, &marker, &why).await;
        let _ = env.github.close_pull(inst, repo, pr).await;
        let details = details_url(env, instance_id);
        let Ok(id) = env
            .github
            .ensure_check_run(
                inst,
                repo,
                &input.sha,
                RELEASE_CHECK_NAME,
                instance_id,
                &details,
            )
            .await
        else {
            return;
        };
        let update = CheckRunUpdate {
            status: Some("completed"),
            conclusion: Some(CheckConclusion::Cancelled),
            output: Some(CheckOutput {
                title: "Sluice could not run this".into(),
                summary: why,
            }),
            ..CheckRunUpdate::default()
        };
        let _ = env.github.update_check_run(inst, repo, id, &update).await;
    }
}

async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &ReleaseInput,
) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: RELEASE_CHECK_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let tag = input.tag.as_str();
    let pick = |c: RepoConfig| {
        unless_ignored(c, &input.sender, |c| {
            c.release_notes.filter(|r| notes::glob_match(&r.tags, tag))
        })
    };
    // The release policy is the default branch's: whoever may push a tag
    // cannot write it.
    let place = format!("on the default branch `{}`", input.default_branch);
    let reference = input.default_branch.as_str();
    let cfg = match configured_at(ctx, env, &target, reference, &place, pick).await? {
        Configured::Run(cfg) => cfg,
        Configured::Done(outcome) => return Ok(outcome),
    };
    let window = release_window_ms(&cfg).map_err(|m| RunError::InvalidInput { message: m })?;
    let ceiling_ms = window + decision_grace_ms(window) + RELEASE_BUDGET_MS;
    ctx.set_ceiling("run ceiling", ceiling_ms).await?;
    let release = Release {
        input,
        target: &target,
        cfg: &cfg,
        deciders: Deciders::of(&cfg.approvers),
        window_ms: window,
    };
    // The wait asks on check runs of its own (a completed check run cannot
    // change on GitHub); the verdict is a fresh check run, the commit's
    // latest `sluice/release-notes`, opened once the decision is known.
    let decided = match decided(ctx, env, &release).await {
        Err(e) if e.is_suspension() => return Err(e),
        other => other,
    };
    // What superseded it, for the notification: the newer tag, or the
    // commit a new push of the tag names.
    let newer = match &decided {
        Ok(Verdict::Skipped { newer, .. }) => newer.clone(),
        _ => None,
    };
    let outcome = reported(ctx, env, &target, |_| async move { decided }).await?;
    notify_auto_skip(ctx, env, input, &outcome, newer.as_deref()).await?;
    Ok(outcome)
}

/// One release's fixed facts.
struct Release<'a> {
    input: &'a ReleaseInput,
    target: &'a CheckTarget<'a>,
    cfg: &'a ReleaseNotesConfig,
    deciders: Deciders,
    window_ms: i64,
}

/// What one window of waiting is about: the notes, their pull request and
/// when the window ends.
struct Waiting {
    notes: String,
    pr: u64,
    /// The branch's head as proposed: what a merge must have merged.
    head: String,
    /// The check run asking for this window's decision.
    check_id: u64,
    /// Windows so far (1, then one more per replan): names the asking
    /// check run.
    window: u32,
    deadline_ms: i64,
    /// Until when a decision GitHub dated inside the window still arrives.
    decisions_until_ms: i64,
    /// The wait's event: names each answer's comment, so a replay finds it.
    round: u32,
    /// Who was answered in this window without deciding (lowercase): they
    /// are not answered again, nor asked about.
    answered: BTreeSet<String>,
}

/// What superseded a waiting release: a newer tag, or the same tag pushed
/// again (at `sha`, the commit it names now). An older journal recorded a
/// newer tag's name only, which reads as `Tag`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Newer {
    Push { tag: String, sha: String },
    Tag(String),
}

impl Newer {
    fn of(a: &Approval) -> Option<Newer> {
        let tag = a.superseded_by.clone()?;
        Some(match a.superseded_by_sha.clone() {
            Some(sha) => Newer::Push { tag, sha },
            None => Newer::Tag(tag),
        })
    }

    /// What the notification names as the newer revision.
    fn revision(&self) -> &str {
        match self {
            Newer::Push { sha, .. } => sha,
            Newer::Tag(tag) => tag,
        }
    }
}

/// What one event did to the wait.
enum Answered {
    /// A verdict: the wait is over.
    Ended(Verdict),
    /// It waits on; the event cost one of `ROUNDS_MAX`.
    Round,
    /// It waits on; the event cost no round (routing bounded it).
    Free,
}

impl Answered {
    /// Waits on: a round when routing did not bound the sender (a named
    /// approver).
    fn waits(named: bool) -> Answered {
        match named {
            true => Answered::Round,
            false => Answered::Free,
        }
    }
}

/// What an event about this window asks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked {
    Approve,
    Reject,
    Replan,
    /// A merge of a pull request changed after Sluice proposed it.
    ChangedMerge,
}

/// One event about this window.
struct Act<'a> {
    sender: &'a str,
    ask: Asked,
    /// What they did, in words.
    how: &'static str,
    /// When GitHub dated it; None for a press.
    dated_ms: Option<i64>,
}

/// What `d` asks of the window `w`; None when it is about another (a press
/// of an earlier window's check run, an unknown button).
fn act_of<'a>(d: &'a Decision, w: &Waiting) -> Option<Act<'a>> {
    let act = |sender, ask, how, dated_ms| Act {
        sender,
        ask,
        how,
        dated_ms,
    };
    Some(match d {
        Decision::Button {
            check_run_id,
            identifier,
            sender,
        } if *check_run_id == w.check_id => match identifier.as_str() {
            i if i == APPROVE.identifier => act(sender, Asked::Approve, "pressed Approve", None),
            i if i == REJECT.identifier => act(sender, Asked::Reject, "pressed Reject", None),
            _ => return None,
        },
        Decision::PullClosed {
            number,
            merged,
            sender,
            head_sha,
            decided_ms,
        } if *number == w.pr => match merged {
            true if !same_sha(head_sha.as_deref(), &w.head) => act(
                sender,
                Asked::ChangedMerge,
                "merged the pull request",
                *decided_ms,
            ),
            true => act(
                sender,
                Asked::Approve,
                "merged the pull request",
                *decided_ms,
            ),
            false => act(
                sender,
                Asked::Reject,
                "closed the pull request",
                *decided_ms,
            ),
        },
        Decision::Replan {
            check_run_id,
            sender,
        } if *check_run_id == w.check_id => act(sender, Asked::Replan, "re-ran the check", None),
        _ => return None,
    })
}

/// Until when the wait listens: its deadline, then the grace in which only
/// a decision GitHub dated reaches it (routing sends nothing else after the
/// deadline), kept `CLOSING_MS` clear of the run's ceiling (which an
/// instance started before the grace existed set without it).
fn listen_until_ms(ctx: &Ctx<'_>, w: &Waiting) -> i64 {
    w.decisions_until_ms
        .min(ctx.ceiling_at_ms() - CLOSING_MS)
        .max(w.deadline_ms)
}

/// Composes the notes, opens the pull request, enters waiting and waits
/// for the decision.
async fn decided(ctx: &Ctx<'_>, env: &RunEnv<'_>, r: &Release<'_>) -> Result<Verdict, RunError> {
    let mut w = prepare(ctx, env, r).await?;
    if let Some(newer) = enter_waiting(ctx, env, r, &mut w).await? {
        return superseded(ctx, env, r, &w, &newer).await;
    }
    let mut rounds = 0;
    for event in 0..EVENTS_MAX {
        if rounds >= ROUNDS_MAX {
            break;
        }
        w.round = event;
        // Every event is a journaled wait, even one left with no time (it
        // times out at once): a replay takes the same events.
        let left_ms = (listen_until_ms(ctx, &w) - ctx.now_ms()).max(0);
        let payload = match ctx
            .wait_for_event(RELEASE_WAIT, RELEASE_EVENT, left_ms)
            .await
        {
            Ok(p) => p,
            Err(RunError::EventTimedOut { .. }) => return timed_out(ctx, env, r, &w).await,
            Err(e) => return Err(e),
        };
        let Ok(decision) = serde_json::from_value::<Decision>(payload) else {
            // A wake: a newer push may have superseded this one.
            rounds += 1;
            match superseded_by(ctx, env).await? {
                Some(newer) => return superseded(ctx, env, r, &w, &newer).await,
                None => continue,
            }
        };
        match decide(ctx, env, r, &mut w, &decision).await? {
            Answered::Ended(v) => return Ok(v),
            Answered::Round => rounds += 1,
            Answered::Free => {}
        }
    }
    timed_out(ctx, env, r, &w).await
}

/// Acts on one event. Someone who may not decide, or a decision GitHub
/// dated after the deadline, is answered once in the window and decides
/// nothing; a decider's approval publishes, a rejection ends the wait, a
/// replan restarts the window.
async fn decide(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &mut Waiting,
    d: &Decision,
) -> Result<Answered, RunError> {
    let named = r.deciders.names(d.sender());
    let Some(act) = act_of(d, w) else {
        return Ok(Answered::waits(named));
    };
    let who = act.sender.to_ascii_lowercase();
    if w.answered.contains(&who) {
        return Ok(Answered::waits(named));
    }
    if let Some(at) = act.dated_ms.filter(|at| *at >= w.deadline_ms) {
        answer_late(ctx, env, r, w, &act, at).await?;
        w.answered.insert(who);
        return Ok(Answered::waits(named));
    }
    if !may_decide_as(ctx, env, r.target, act.sender, &r.deciders).await? {
        answer_outsider(ctx, env, r, w, act.sender, act.how).await?;
        w.answered.insert(who);
        return Ok(Answered::Free);
    }
    match act.ask {
        Asked::Approve => publish(ctx, env, r, w, act.sender, act.how)
            .await
            .map(Answered::Ended),
        Asked::Reject => rejected(ctx, env, r, w, act.sender, act.how)
            .await
            .map(Answered::Ended),
        Asked::ChangedMerge => {
            answer_changed_merge(ctx, env, r, w, act.sender).await?;
            Ok(Answered::Round)
        }
        Asked::Replan => {
            replan(ctx, env, r, w, act.sender).await?;
            Ok(Answered::Round)
        }
    }
}

/// Notes composed and proposed in the pull request; the window not
/// started yet.
async fn prepare(ctx: &Ctx<'_>, env: &RunEnv<'_>, r: &Release<'_>) -> Result<Waiting, RunError> {
    let notes = compose(ctx, env, r).await?;
    let (pr, head) = propose(ctx, env, r, &notes).await?;
    Ok(Waiting {
        notes,
        pr,
        head,
        check_id: 0,
        window: 0,
        deadline_ms: 0,
        decisions_until_ms: 0,
        round: 0,
        answered: BTreeSet::new(),
    })
}

/// The notes, from the commits since the previous matching tag.
async fn compose(ctx: &Ctx<'_>, env: &RunEnv<'_>, r: &Release<'_>) -> Result<String, RunError> {
    let (inst, repo, tag) = (
        r.input.installation_id,
        r.input.repo.as_str(),
        r.input.tag.as_str(),
    );
    ctx.step("compose notes", github_step(), |_| async {
        let gh = &env.github;
        let tags: Vec<Tag> = gh.tags(inst, repo).await.map_err(github_failure)?;
        let previous = notes::previous_tag(&tags, &r.cfg.tags, tag);
        let commits = match previous {
            Some(p) => gh
                .compare(inst, repo, &p.sha, &r.input.sha)
                .await
                .map_err(github_failure)?,
            None => Vec::new(),
        };
        let mut numbers: Vec<u64> = commits
            .iter()
            .filter_map(|c| notes::pull_of(&c.message))
            .collect();
        numbers.dedup();
        let mut pulls: Vec<PullInfo> = Vec::new();
        for n in numbers.into_iter().take(PULLS_READ_MAX) {
            pulls.extend(gh.pull(inst, repo, n).await.map_err(github_failure)?);
        }
        Ok(notes::render(&NotesInput {
            tag,
            previous: previous.map(|p| p.name.as_str()),
            commits: &commits,
            pulls: &pulls,
        }))
    })
    .await
}

/// Opens (or, on a replan, updates) the approval pull request.
async fn propose(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    notes: &str,
) -> Result<(u64, String), RunError> {
    let (inst, repo, tag) = (
        r.input.installation_id,
        r.input.repo.as_str(),
        r.input.tag.as_str(),
    );
    let branch = branch_of(ctx.instance_id(), tag);
    let path = format!("{NOTES_DIR}/{}.md", tag.replace('/', "-"));
    let title = format!("Release notes for {tag}");
    let body = format!(
        "{notes}\n---\nMerge this pull request (or press **Approve** on the `{RELEASE_CHECK_NAME}` \
         check) to publish the release of `{tag}` at {}; close it (or press **Reject**) to \
         publish nothing. Who decides: {}.",
        r.input.sha,
        r.deciders.describe(repo)
    );
    ctx.step("open approval pull request", github_step(), |_| async {
        let base_sha = env
            .github
            .branch_head(inst, repo, &r.input.default_branch)
            .await
            .map_err(github_failure)?
            .ok_or_else(|| {
                FailureTag::GitHubApi.fatal(format!("no branch {}", r.input.default_branch))
            })?;
        let p = NewPull {
            branch: &branch,
            base: &r.input.default_branch,
            base_sha: &base_sha,
            path: &path,
            content: notes,
            title: &title,
            body: &body,
        };
        env.github
            .open_pull(inst, repo, &p)
            .await
            .map_err(github_failure)
    })
    .await
}

/// The approval branch of one push of `tag` (the instance `instance_id`):
/// a push of the same tag at another commit proposes on a branch, and so a
/// pull request, of its own.
pub fn branch_of(instance_id: &str, tag: &str) -> String {
    let digest = hex::encode(Sha256::digest(instance_id.as_bytes()));
    format!("{BRANCH_PREFIX}{tag}-{}", &digest[..BRANCH_PUSH_HEX_CHARS])
}

/// Starts the window: its deadline, the index row the decision's webhook
/// finds this instance by, the buttons; then supersedes older waiting tags
/// and earlier pushes of this one. Some(what) when this one is superseded.
async fn enter_waiting(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &mut Waiting,
) -> Result<Option<Newer>, RunError> {
    start_window(ctx, env, r, w).await?;
    supersede_older(ctx, env, r).await
}

/// The window's deadline, then the check run asking for the decision with
/// the index row the decision's webhook finds this instance by.
async fn start_window(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &mut Waiting,
) -> Result<(), RunError> {
    let (since_ms, deadline_ms): (i64, i64) = ctx
        .step("approval deadline", StepConfig::once(), |_| async {
            Ok((ctx.now_ms(), ctx.now_ms() + r.window_ms))
        })
        .await?;
    w.window += 1;
    w.deadline_ms = deadline_ms;
    w.decisions_until_ms = deadline_ms + decision_grace_ms(r.window_ms);
    w.answered.clear();
    w.check_id = ask(ctx, env, r, w, since_ms).await?;
    Ok(())
}

/// The index row of this window, for the check run `check_id`.
fn approval_row(
    ctx: &Ctx<'_>,
    r: &Release<'_>,
    w: &Waiting,
    check_id: u64,
    since_ms: i64,
) -> Approval {
    Approval {
        instance_id: ctx.instance_id().to_owned(),
        repo: r.input.repo.clone(),
        tag: r.input.tag.clone(),
        pr_number: i64::try_from(w.pr).unwrap_or(i64::MAX),
        check_run_id: i64::try_from(check_id).unwrap_or(i64::MAX),
        state: "waiting".into(),
        superseded_by: None,
        superseded_by_sha: None,
        deciders: r.deciders.describe(&r.input.repo),
        approvers: r.deciders.to_json(),
        waiting_since_ms: since_ms,
        deadline_ms: w.deadline_ms,
        decisions_until_ms: Some(w.decisions_until_ms),
    }
}

/// A check run of its own for this window (found by its external id
/// before one is created), recorded in the index, then concluded
/// `action_required` with Approve and Reject: its buttons appear only once
/// a press can find the instance. Returns its id.
async fn ask(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    since_ms: i64,
) -> Result<u64, RunError> {
    let hours = r.window_ms as f64 / 3_600_000.0;
    let summary = format!(
        "The notes for `{}` are in pull request #{}. {} may approve (merge it, or press \
         Approve) or reject (close it, or press Reject) within {hours:.1} h (until {} ms since \
         the epoch); Re-run regenerates the notes and restarts the window.",
        r.input.tag,
        w.pr,
        r.deciders.describe(&r.input.repo),
        w.deadline_ms
    );
    let update = CheckRunUpdate {
        status: Some("completed"),
        conclusion: Some(CheckConclusion::ActionRequired),
        output: Some(CheckOutput {
            title: format!("Release {}: waiting for approval", r.input.tag),
            summary,
        }),
        actions: Some(vec![APPROVE, REJECT]),
        ..CheckRunUpdate::default()
    };
    let (inst, repo) = (r.input.installation_id, r.input.repo.as_str());
    let external_id = format!("{}:ask:{}", ctx.instance_id(), w.window);
    let details = details_url(env, ctx.instance_id());
    ctx.step("request approval", github_step(), |_| async {
        let gh = &env.github;
        let id = gh
            .ensure_check_run(
                inst,
                repo,
                &r.input.sha,
                RELEASE_CHECK_NAME,
                &external_id,
                &details,
            )
            .await
            .map_err(github_failure)?;
        let row = approval_row(ctx, r, w, id, since_ms);
        releases::record(env.db, &row, ctx.now_ms())
            .await
            .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
        gh.update_check_run(inst, repo, id, &update)
            .await
            .map_err(github_failure)?;
        Ok(id)
    })
    .await
}

/// Supersedes every waiting approval of an older tag of the repository,
/// and of an earlier push of this tag, and wakes its instance. Some(what)
/// when this one is superseded instead: the tag names another commit now
/// (pushed again since), or a newer tag already waits. One conditional
/// statement per row: a row already publishing is never touched.
async fn supersede_older(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
) -> Result<Option<Newer>, RunError> {
    let (me, tag, sha) = (
        ctx.instance_id(),
        r.input.tag.as_str(),
        r.input.sha.as_str(),
    );
    let (inst, repo) = (r.input.installation_id, r.input.repo.as_str());
    ctx.step("supersede older", StepConfig::default(), |_| async {
        let db_err = |e: crate::store::StoreError| FailureTag::Index.retryable(e.to_string());
        let now = ctx.now_ms();
        // Of two pushes of one tag, the one whose commit it names wins,
        // whichever reaches here first.
        let names = env
            .github
            .tag_target(inst, repo, tag)
            .await
            .map_err(github_failure)?;
        if let Some(now_names) = names.filter(|n| !n.eq_ignore_ascii_case(sha)) {
            releases::supersede(env.db, me, tag, Some(&now_names), now)
                .await
                .map_err(db_err)?;
            return Ok(Some(Newer::Push {
                tag: tag.to_owned(),
                sha: now_names,
            }));
        }
        let waiting = releases::waiting_in(env.db, repo).await.map_err(db_err)?;
        let others = waiting.iter().filter(|a| a.instance_id != me);
        if let Some(n) = others.clone().find(|a| notes::tag_cmp(&a.tag, tag).is_gt()) {
            releases::supersede(env.db, me, &n.tag, None, now)
                .await
                .map_err(db_err)?;
            return Ok(Some(Newer::Tag(n.tag.clone())));
        }
        for older in others {
            let by_sha = (older.tag == tag).then_some(sha);
            if releases::supersede(env.db, &older.instance_id, tag, by_sha, now)
                .await
                .map_err(db_err)?
            {
                // A lost wake is recovered by the older one's own window:
                // its claim at the timeout finds it superseded.
                let _ = env.waker.wake(&older.instance_id, RELEASE_EVENT).await;
            }
        }
        Ok(None)
    })
    .await
}

/// What superseded this instance, if anything did.
async fn superseded_by(ctx: &Ctx<'_>, env: &RunEnv<'_>) -> Result<Option<Newer>, RunError> {
    ctx.step("read approval", StepConfig::default(), |_| async {
        let row = releases::get(env.db, ctx.instance_id())
            .await
            .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
        Ok(row.as_ref().and_then(Newer::of))
    })
    .await
}

/// Claims the decision `state` for this instance: false when a newer tag
/// superseded it first.
async fn claim(ctx: &Ctx<'_>, env: &RunEnv<'_>, state: &'static str) -> Result<bool, RunError> {
    ctx.step("claim decision", StepConfig::default(), |_| async {
        releases::claim(env.db, ctx.instance_id(), state, ctx.now_ms())
            .await
            .map_err(|e| FailureTag::Index.retryable(e.to_string()))
    })
    .await
}

/// Approved: publish the release (found by its tag first, so a replay
/// makes none twice).
async fn publish(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    by: &str,
    how: &str,
) -> Result<Verdict, RunError> {
    if !claim(ctx, env, "publishing").await? {
        return superseded_late(ctx, env, r, w).await;
    }
    let (inst, repo, tag) = (
        r.input.installation_id,
        r.input.repo.as_str(),
        r.input.tag.as_str(),
    );
    // The notes were approved for this commit: a tag moved since names
    // code nobody approved (a deleted one is made again at the commit).
    let sha = r.input.sha.as_str();
    let now_names: Option<String> = ctx
        .step("read tag", github_step(), |_| async {
            env.github
                .tag_target(inst, repo, tag)
                .await
                .map_err(github_failure)
        })
        .await?;
    if let Some(moved) = now_names.filter(|t| !t.eq_ignore_ascii_case(sha)) {
        return Ok(Verdict::Failed {
            summary: format!(
                "Not released: `{tag}` now names {moved}, not {sha}, the commit these notes were approved for. Push the tag again to ask again."
            ),
        });
    }
    let id: u64 = ctx
        .step("publish release", github_step(), |_| async {
            let gh = &env.github;
            let latest_now = gh
                .latest_release_tag(inst, repo)
                .await
                .map_err(github_failure)?;
            let kind = notes::release_kind(tag, latest_now.as_deref(), &r.cfg.tags);
            let (id, _) = gh
                .ensure_release(inst, repo, tag, sha, &w.notes, kind)
                .await
                .map_err(github_failure)?;
            Ok(id)
        })
        .await?;
    let done = format!("Released `{tag}` (release {id}): @{by} {how}.");
    // The pull request is said so on, and left for the team to merge (the
    // notes file) or close.
    say_once(ctx, env, r, w, "announce release", "released", &done).await?;
    Ok(Verdict::Passed {
        summary: format!("{done}\n\n{}", w.notes),
    })
}

/// Rejected: close the pull request, publish nothing.
async fn rejected(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    by: &str,
    how: &str,
) -> Result<Verdict, RunError> {
    if !claim(ctx, env, "rejected").await? {
        return superseded_late(ctx, env, r, w).await;
    }
    close(ctx, env, r, w, None).await?;
    Ok(Verdict::Skipped {
        reason: Some(SkipReason::Rejected),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not released: @{by} {how}; no release of `{}`.",
            r.input.tag
        ),
        newer: None,
    })
}

/// The window ended unanswered: close the pull request with a comment.
async fn timed_out(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
) -> Result<Verdict, RunError> {
    if !claim(ctx, env, "timed_out").await? {
        return superseded_late(ctx, env, r, w).await;
    }
    let minutes = r.window_ms / 60_000;
    let why = format!(
        "Nobody decided on the release of `{}` within {minutes} minutes \
         (`confirmation_timeout`): nothing was released. Push the tag again or re-run the check \
         to ask again.",
        r.input.tag
    );
    close(ctx, env, r, w, Some(&why)).await?;
    Ok(Verdict::Skipped {
        reason: Some(SkipReason::ConfirmationTimeout),
        tag: SkipTag::RunSkipped,
        summary: format!("Not released: {why}"),
        newer: None,
    })
}

/// A decision that lost to a supersession: end superseded by the tag the
/// row names.
async fn superseded_late(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
) -> Result<Verdict, RunError> {
    let newer = superseded_by(ctx, env)
        .await?
        .unwrap_or_else(|| Newer::Tag(String::new()));
    superseded(ctx, env, r, w, &newer).await
}

/// Superseded by `newer` (a newer tag, or a new push of this one): close
/// the pull request, saying by what.
async fn superseded(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    newer: &Newer,
) -> Result<Verdict, RunError> {
    let (tag, sha) = (r.input.tag.as_str(), r.input.sha.as_str());
    let why = match newer {
        Newer::Tag(n) => format!(
            "Superseded by `{n}`, a newer tag now waiting for approval: no release of `{tag}`."
        ),
        Newer::Push { sha: now, .. } => format!(
            "Superseded: `{tag}` was pushed again and now names {now}, not {sha}; that push \
             asks for its own approval. Nothing was released from these notes."
        ),
    };
    close(ctx, env, r, w, Some(&why)).await?;
    Ok(Verdict::Skipped {
        reason: Some(SkipReason::Superseded),
        tag: SkipTag::RunSkipped,
        summary: format!("Not released: {why}"),
        newer: Some(newer.revision().to_owned()),
    })
}

/// Closes the pull request, after a comment saying why when there is one.
async fn close(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    why: Option<&str>,
) -> Result<(), RunError> {
    let (inst, repo) = (r.input.installation_id, r.input.repo.as_str());
    let marker = format!("sluice:{}:close", ctx.instance_id());
    ctx.step("close pull request", github_step(), |_| async {
        if let Some(why) = why {
            env.github
                .comment_once(inst, repo, w.pr, &marker, why)
                .await
                .map_err(github_failure)?;
        }
        env.github
            .close_pull(inst, repo, w.pr)
            .await
            .map_err(github_failure)
    })
    .await
}

fn same_sha(given: Option<&str>, proposed: &str) -> bool {
    given.is_some_and(|g| g.eq_ignore_ascii_case(proposed))
}

/// A merge of a pull request someone changed after Sluice proposed it
/// approves nothing: what was merged is not the notes a decider read.
async fn answer_changed_merge(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    sender: &str,
) -> Result<(), RunError> {
    let marker = format!("changed:{}:{}", w.window, sender.to_ascii_lowercase());
    let text = format!(
        "@{sender} merged this pull request, but it was changed after Sluice proposed the \
         notes (its head is no longer {}): the merge published nothing. Press **Approve** on \
         the `sluice/release-notes` check run to publish `{}` with the notes as proposed.",
        w.head, r.input.tag
    );
    say_once(ctx, env, r, w, "answer changed merge", &marker, &text).await
}

/// Says `text` once on the approval pull request, as the step `step`; the
/// marker (under the instance's id) lets a replay find the comment.
async fn say_once(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    step: &str,
    marker: &str,
    text: &str,
) -> Result<(), RunError> {
    let (inst, repo) = (r.input.installation_id, r.input.repo.as_str());
    let marker = format!("sluice:{}:{marker}", ctx.instance_id());
    ctx.step(step, github_step(), |_| async {
        env.github
            .comment_once(inst, repo, w.pr, &marker, text)
            .await
            .map_err(github_failure)
    })
    .await
}

/// Someone who may not decide acted: say so on the pull request, once per
/// sender and window; the instance waits on.
async fn answer_outsider(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    sender: &str,
    how: &str,
) -> Result<(), RunError> {
    let marker = format!("outsider:{}:{}", w.window, sender.to_ascii_lowercase());
    let text = format!(
        "@{sender} {how}, but only {} may decide on the release of `{}`: this decided \
         nothing. The release still waits for them.",
        r.deciders.describe(&r.input.repo),
        r.input.tag
    );
    say_once(ctx, env, r, w, "answer outsider", &marker, &text).await
}

/// A merge or close GitHub dated after the deadline (it reached Sluice
/// within the grace): too late to decide. Said once per sender and window;
/// the instance waits on for a decision made in time still on its way.
async fn answer_late(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &Waiting,
    act: &Act<'_>,
    at_ms: i64,
) -> Result<(), RunError> {
    let marker = format!("late:{}:{}", w.window, act.sender.to_ascii_lowercase());
    let late_s = (at_ms - w.deadline_ms) / 1000;
    let text = format!(
        "@{} {} {late_s} s after the window to decide on `{}` closed: this decided nothing, \
         and nothing will be released from these notes. Push the tag again to ask again.",
        act.sender, act.how, r.input.tag
    );
    say_once(ctx, env, r, w, "answer late", &marker, &text).await
}

/// Re-run: regenerate the notes, update the pull request and restart the
/// window (the queue-policy seed's replan), with the ceiling moved to cover
/// the new window. A replan that could not fit the longest ceiling is
/// refused on the pull request and the window runs on.
async fn replan(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    r: &Release<'_>,
    w: &mut Waiting,
    sender: &str,
) -> Result<(), RunError> {
    // Decided once and journaled: a replay takes the same branch whatever
    // the clock says then.
    let ceiling: Option<i64> = ctx
        .step("replan window", StepConfig::once(), |_| async {
            let started_ms = ctx.ceiling_at_ms() - ctx.max_duration_ms();
            let grace_ms = decision_grace_ms(r.window_ms);
            let ceiling_ms = ctx.now_ms() - started_ms + r.window_ms + grace_ms + RELEASE_BUDGET_MS;
            Ok((ceiling_ms <= RUN_DURATION_MS_MAX).then_some(ceiling_ms))
        })
        .await?;
    let Some(ceiling_ms) = ceiling else {
        let why = format!(
            "@{sender} re-ran the check, but a new window would outlive the run's longest \
             ceiling: the current window stands."
        );
        let marker = format!("replan:{}:{}", w.window, sender.to_ascii_lowercase());
        return say_once(ctx, env, r, w, "refuse replan", &marker, &why).await;
    };
    ctx.set_ceiling("run ceiling", ceiling_ms).await?;
    let fresh = prepare(ctx, env, r).await?;
    w.notes = fresh.notes;
    w.pr = fresh.pr;
    w.head = fresh.head;
    start_window(ctx, env, r, w).await
}

/// Every automatic skip is announced (the queue-policy seed); a rejection
/// is a person's answer and stays silent.
async fn notify_auto_skip(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &ReleaseInput,
    outcome: &RunOutcome,
    newer: Option<&str>,
) -> Result<(), RunError> {
    let RunOutcome::Skipped {
        reason: Some(reason),
        ..
    } = outcome
    else {
        return Ok(());
    };
    let Some(r) = SkipReason::parse(reason).filter(|r| *r != SkipReason::Rejected) else {
        return Ok(());
    };
    let n = AutoSkipped {
        event: "release_auto_skipped",
        execution_id: ctx.instance_id(),
        repo: &input.repo,
        branch: &input.default_branch,
        revision: &input.sha,
        reason: r.as_str(),
        newer_revision: newer,
        tag: Some(&input.tag),
        at_ms: ctx.now_ms(),
    };
    notify::auto_skipped(ctx, env, &n).await?;
    Ok(())
}
