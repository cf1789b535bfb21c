//! The executor protocol of one run instance, as pure decisions over the
//! engine's interfaces: never two passes of an instance at once, no
//! interrupt dropped, every wake-up kept, and a watchdog for a pass that
//! dies. The host (a Durable Object in the Worker, a fake in native tests)
//! carries the decisions out: it runs passes, sets and deletes its alarm,
//! applies commands.
//!
//! Events reach the driver as calls: `trigger` (a create, a poke, an
//! event: "run a pass, or one more after the running one"), `on_alarm`,
//! `begin_command`/`end_command` (an operator's command), and the loop
//! `drive` runs passes until the instance waits, ends or stops being
//! triggered.
//!
//! Architecture invariant: no I/O here but through `Host`, no clock but
//! `Host::now_ms`, no `worker` types.

use std::cell::Cell;

use async_trait::async_trait;
use futures_util::future::join;

use super::context::{Interrupt, InterruptFlag};
use super::error::RunError;
use super::executor::{Command, CommandError, PassResult};
use crate::journal::Status;
use crate::limits::SWEEP_INTERVAL_MS;

/// Passes one wake-up may chain when triggers keep arriving during a pass;
/// beyond it an alarm set at once takes over, so one invocation cannot
/// run forever.
pub const PASSES_PER_WAKE_MAX: u32 = 50;
/// How soon a pass that died is resumed by its own alarm: long enough that
/// a live pass's watchdog rarely fires (it is re-armed when it does), short
/// enough that a crash costs seconds, not the sweep's minute.
pub const PASS_WATCHDOG_MS: i64 = 15_000;
/// When storage or the index fails mid-pass, try again this much later.
pub const STORE_RETRY_DELAY_MS: i64 = 5_000;
/// Doublings of a refused row's retry past which it stays at the sweep's
/// cadence (5 s doubled 4 times passes 60 s); bounds the shift.
const ROW_RETRY_DOUBLINGS_MAX: u32 = 4;
/// Kinds of interrupt (a pause, a terminate): rounds of carrying out
/// pending ones before a command, since each round's is stronger.
const INTERRUPT_KINDS: usize = 2;

/// What the host does for the driver.
#[async_trait(?Send)]
pub trait Host {
    fn now_ms(&self) -> i64;
    async fn set_alarm(&self, at_ms: i64) -> Result<(), String>;
    async fn delete_alarm(&self) -> Result<(), String>;
    /// When the alarm is set for, if it is.
    async fn alarm_at(&self) -> Result<Option<i64>, String>;
    /// One pass of the engine (and the run's finalize when it ended).
    async fn pass(&self, interrupt: &InterruptFlag) -> Result<PassResult, RunError>;
    /// An operator command on the idle instance (and the run's finalize
    /// when it ended).
    async fn command(&self, cmd: &Command) -> Result<Status, CommandError>;
    /// Keeps (None: forgets) the interrupt a running pass answered
    /// "pending", in storage that outlives the pass (`JournalStore`).
    fn keep_interrupt(&self, interrupt: Option<Interrupt>) -> Result<(), String>;
    fn kept_interrupt(&self) -> Result<Option<Interrupt>, String>;
}

/// What a trigger leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kick {
    /// No pass runs: start driving now.
    Start,
    /// A pass runs; it was asked for one more (or nothing, when the trigger
    /// does not need one).
    Queued,
}

/// What the alarm leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAlarm {
    /// No pass runs: drive.
    Drive,
    /// The watchdog of a pass still running (a long step): re-arm it.
    RearmWatchdog(i64),
}

/// How an operator command meets the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandGate {
    /// Nothing runs: apply it now (the driver holds the executor meanwhile).
    Apply,
    /// A pass runs: it is honoured at the pass's next durable call; the
    /// answer is the status it will take.
    Interrupted(Status),
    /// A pass runs and the command cannot interrupt it.
    Refused(String),
}

/// After a command: drive (the instance is runnable, or a trigger or
/// interrupt arrived meanwhile), delete the alarm (it is paused or ended),
/// or leave it (the command was refused: the instance is as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCommand {
    Drive,
    DeleteAlarm,
    Keep,
}

/// The alarm a pass's end calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alarm {
    At(i64),
    Delete,
}

/// The protocol's state: shared between the host's concurrent handlers
/// (a fetch during a pass) on one thread.
#[derive(Default)]
pub struct Driver {
    running: Cell<bool>,
    rerun: Cell<bool>,
    /// Read by the running pass at each durable call.
    pub interrupt: InterruptFlag,
    /// The kept interrupt was read into `interrupt`: from then on every
    /// interrupt is kept through this driver, so it is read once per life
    /// of the object, not per drive.
    kept_loaded: Cell<bool>,
}

impl Driver {
    /// A create, a poke or an event. `rerun_if_busy`: the running pass may
    /// have evaluated its wait before this arrived, so it must pass again.
    pub fn trigger(&self, rerun_if_busy: bool) -> Kick {
        if self.running.get() {
            if rerun_if_busy {
                self.rerun.set(true);
            }
            return Kick::Queued;
        }
        Kick::Start
    }

    pub fn on_alarm(&self, now_ms: i64) -> OnAlarm {
        if self.running.get() {
            OnAlarm::RearmWatchdog(now_ms + PASS_WATCHDOG_MS)
        } else {
            OnAlarm::Drive
        }
    }

    /// An operator command arrives. `Apply` holds the executor until
    /// `end_command`.
    pub fn begin_command(&self, cmd: &Command) -> CommandGate {
        if !self.running.replace(true) {
            return CommandGate::Apply;
        }
        let asked = match cmd {
            Command::Terminate => Interrupt::Terminate,
            Command::Pause => Interrupt::Pause,
            _ => {
                return CommandGate::Refused(
                    "a pass is running; pause or terminate it first".into(),
                )
            }
        };
        // A pause after a pending terminate leaves the terminate standing.
        let flag = self.interrupt.get().map_or(asked, |held| held.max(asked));
        self.interrupt.set(Some(flag));
        CommandGate::Interrupted(flag.status())
    }

    /// The applied command left the instance in `status` (None: it was
    /// refused and changed nothing).
    pub fn end_command(&self, status: Option<Status>) -> AfterCommand {
        self.running.set(false);
        let runnable = status.is_some_and(Status::is_runnable);
        if runnable || self.rerun.replace(false) || self.interrupt.get().is_some() {
            AfterCommand::Drive
        } else if status.is_some() {
            AfterCommand::DeleteAlarm
        } else {
            AfterCommand::Keep
        }
    }

    /// Merges the interrupt the journal keeps into memory, once per life of
    /// the object: from then on every interrupt is kept through here.
    fn load_kept(&self, host: &dyn Host) -> Result<(), String> {
        if !self.kept_loaded.get() {
            let kept = host.kept_interrupt()?;
            self.interrupt.set(self.interrupt.get().max(kept));
            self.kept_loaded.set(true);
        }
        Ok(())
    }

    /// The alarm a pass's end calls for, while an interrupt is kept: never
    /// none and never later than a watchdog, so if the drive carrying it
    /// out dies, the alarm's drive does it.
    fn guarded(&self, alarm: Alarm, now_ms: i64) -> Alarm {
        if self.interrupt.get().is_none() {
            return alarm;
        }
        let watchdog = now_ms + PASS_WATCHDOG_MS;
        match alarm {
            Alarm::Delete => Alarm::At(watchdog),
            Alarm::At(at) => Alarm::At(at.min(watchdog)),
        }
    }

    /// A purge emptied the object: nothing is pending any more, and a new
    /// instance created in it starts with nothing kept.
    pub fn forget_purged(&self) {
        self.interrupt.set(None);
        self.kept_loaded.set(false);
    }

    /// Forgets `done`, carried out, unless a stronger one was raised while
    /// it was (that one stays, kept and in memory).
    fn forget_if_unchanged(&self, host: &dyn Host, done: Interrupt) -> Result<(), String> {
        if self.interrupt.get() != Some(done) {
            return Ok(());
        }
        host.keep_interrupt(None)?;
        self.interrupt.set(None);
        Ok(())
    }

    /// Takes the executor for a drive; false when a pass already runs (it
    /// was asked for one more if the caller needs it).
    fn begin_drive(&self, rerun_if_busy: bool) -> bool {
        if self.running.replace(true) {
            if rerun_if_busy {
                self.rerun.set(true);
            }
            return false;
        }
        true
    }
}

/// The alarm after a pass: the wake-up of a waiting instance, now for a
/// runnable one (a pass budget, an interrupted chain), none for a finished
/// or paused one, a retry after a storage fault. An instance D1 has no
/// row of yet keeps an alarm (the sweep cannot find it): a live one no
/// later than its row's backed-off retry, a paused or ended one at the
/// sweep's cadence, which is what its failed mirror got while it had a
/// row.
pub fn alarm_after(outcome: &Result<PassResult, RunError>, now_ms: i64) -> Alarm {
    match outcome {
        Ok(p) if p.row_refusals > 0 => match alarm_after_pass(p, now_ms) {
            Alarm::At(at) => Alarm::At(at.min(now_ms + row_retry_ms(p.row_refusals))),
            Alarm::Delete => Alarm::At(now_ms + SWEEP_INTERVAL_MS),
        },
        Ok(p) => alarm_after_pass(p, now_ms),
        // Purged while a drive was on its way: an alarm would only find it
        // gone again.
        Err(RunError::NoInstance) => Alarm::Delete,
        Err(RunError::RowRefused { refusals, .. }) => Alarm::At(now_ms + row_retry_ms(*refusals)),
        Err(_) => Alarm::At(now_ms + STORE_RETRY_DELAY_MS),
    }
}

/// After `refusals` passes in a row whose row D1 refused: a storage retry,
/// doubling up to the sweep's cadence, so a D1 that refuses for long is
/// asked once a minute, not every 5 s, and one back is used within a minute.
pub fn row_retry_ms(refusals: u32) -> i64 {
    let doublings = refusals.saturating_sub(1).min(ROW_RETRY_DOUBLINGS_MAX);
    (STORE_RETRY_DELAY_MS << doublings).min(SWEEP_INTERVAL_MS)
}

fn alarm_after_pass(pass: &PassResult, now_ms: i64) -> Alarm {
    match pass {
        PassResult {
            status: Status::Waiting,
            wake_at_ms: Some(wake),
            ..
        } => Alarm::At(*wake),
        p if p.status.is_runnable() => Alarm::At(now_ms),
        _ => Alarm::Delete,
    }
}

/// Runs passes until the instance waits, ends, or stops being triggered;
/// then applies an interrupt no durable call saw (it came after the body's
/// last one), so none is dropped. False when another holder had the
/// executor (it was asked for one more pass if the caller needs it).
pub async fn drive(driver: &Driver, host: &dyn Host, rerun_if_busy: bool) -> bool {
    if !driver.begin_drive(rerun_if_busy) {
        return false;
    }
    // An interrupt answered "pending" to a pass that died is honoured by
    // this one; unreadable, no pass runs that might have to honour it.
    if driver.load_kept(host).is_err() {
        let _ = host.set_alarm(host.now_ms() + STORE_RETRY_DELAY_MS).await;
        driver.running.set(false);
        return true;
    }
    let settled = run_passes(driver, host).await;
    finish_drive(driver, host, settled).await;
    driver.running.set(false);
    true
}

/// Passes while one more is asked for; the alarm the last one calls for.
async fn run_passes(driver: &Driver, host: &dyn Host) -> Alarm {
    let mut settled = Alarm::Delete;
    for _ in 0..PASSES_PER_WAKE_MAX {
        driver.rerun.set(false);
        // If the process dies mid-pass, the alarm resumes the instance
        // (alarms survive restarts); the pass's end replaces it. Set beside
        // the pass rather than before it: its write is issued first, and
        // the object's output gate holds whatever the pass sends until its
        // storage writes, this alarm among them, are durable.
        let watchdog = host.set_alarm(host.now_ms() + PASS_WATCHDOG_MS);
        let (_, outcome) = join(watchdog, host.pass(&driver.interrupt)).await;
        settled = alarm_after(&outcome, host.now_ms());
        set_alarm_to(host, driver.guarded(settled, host.now_ms())).await;
        if !driver.rerun.get() {
            break;
        }
    }
    settled
}

/// Carries out an interrupt no durable call saw. Then what arrived during
/// the awaits (a trigger that found the executor taken, an interrupt
/// answered "pending", a pass budget spent with one more asked for) gets
/// a drive by alarm; with nothing pending, the last pass's alarm stands.
async fn finish_drive(driver: &Driver, host: &dyn Host, mut settled: Alarm) {
    let mut retry_in_ms = 0;
    let pending = driver.interrupt.get();
    if let Some(interrupt) = pending {
        match carry_out(driver, host, interrupt).await {
            // Paused or ended by the command: nothing to wake.
            Carried::Applied => settled = Alarm::Delete,
            Carried::Met => {}
            Carried::NotYet => retry_in_ms = STORE_RETRY_DELAY_MS,
        }
    }
    if driver.rerun.get() || driver.interrupt.get().is_some() {
        let _ = host.set_alarm(host.now_ms() + retry_in_ms).await;
    } else if pending.is_some() {
        set_alarm_to(host, settled).await;
    }
}

async fn set_alarm_to(host: &dyn Host, alarm: Alarm) {
    let _ = match alarm {
        Alarm::At(at) => host.set_alarm(at).await,
        Alarm::Delete => host.delete_alarm().await,
    };
}

/// How carrying out an interrupt went.
enum Carried {
    /// The command paused or ended the instance.
    Applied,
    /// The pass honoured it, or the instance ended first.
    Met,
    /// Not carried out (storage failed): still kept, for the next drive.
    NotYet,
}

/// The interrupt no durable call saw, carried out as a command; forgotten
/// only if it still stands as it was (one raised meanwhile stays).
async fn carry_out(driver: &Driver, host: &dyn Host, interrupt: Interrupt) -> Carried {
    let carried = match host.command(&command_of(interrupt)).await {
        Ok(_) => Carried::Applied,
        Err(CommandError::Conflict(_) | CommandError::NotFound) => Carried::Met,
        Err(_) => return Carried::NotYet,
    };
    match driver.forget_if_unchanged(host, interrupt) {
        Ok(()) => carried,
        Err(_) => Carried::NotYet,
    }
}

fn command_of(interrupt: Interrupt) -> Command {
    match interrupt {
        Interrupt::Terminate => Command::Terminate,
        Interrupt::Pause => Command::Pause,
    }
}

/// A command on an idle instance: an interrupt answered "pending" (to a
/// pass that died, or while an earlier command was applied) goes first,
/// then is forgotten, so it cannot come back after this command (a
/// resume). Each round carries out a stronger one than the last (a pause,
/// then a terminate), so two rounds carry out whatever was asked.
async fn apply_command(
    driver: &Driver,
    host: &dyn Host,
    cmd: &Command,
) -> Result<Status, CommandError> {
    driver.load_kept(host).map_err(CommandError::Store)?;
    let mut carried = None;
    for _ in 0..INTERRUPT_KINDS {
        let Some(pending) = driver.interrupt.get() else {
            break;
        };
        match host.command(&command_of(pending)).await {
            Ok(status) => carried = Some((command_of(pending), status)),
            Err(CommandError::Conflict(_) | CommandError::NotFound) => {}
            Err(e) => return Err(e),
        }
        driver
            .forget_if_unchanged(host, pending)
            .map_err(CommandError::Store)?;
    }
    if matches!(cmd, Command::Restart { .. }) {
        // A restart keeps its cut journal as runnable before its index
        // write: if the isolate dies there, this alarm drives it (the
        // index still reads it ended, so the sweep would not). Only ever
        // sooner: refused, it costs one pass, which sets the instance's own
        // alarm again, and refusals repeated cannot put a wake-up off.
        let watchdog = host.now_ms() + PASS_WATCHDOG_MS;
        let prior = host.alarm_at().await.unwrap_or(None);
        if prior.is_none_or(|at| at > watchdog) {
            let _ = host.set_alarm(watchdog).await;
        }
    }
    match (host.command(cmd).await, carried) {
        // This very command was what was pending: it is done.
        (Err(CommandError::Conflict(_)), Some((done, status))) if done == *cmd => Ok(status),
        (result, _) => result,
    }
}

/// An operator command, as the host receives it: applied now, honoured by
/// the running pass, or refused. When the command leaves the instance
/// runnable (a resume, a restart) or something arrived meanwhile, the
/// answer says to drive: the host starts `drive` without holding the
/// request open.
pub async fn command(
    driver: &Driver,
    host: &dyn Host,
    cmd: &Command,
) -> Result<CommandAnswer, CommandError> {
    // What is kept joins what this command meets, so the answer names
    // what stands (a holder that could not read it yet reads it later).
    let _ = driver.load_kept(host);
    let before = driver.interrupt.get();
    match driver.begin_command(cmd) {
        CommandGate::Interrupted(status) => {
            // Kept before the answer says "pending": a pass that dies
            // before its next durable call does not drop it.
            if let Err(e) = host.keep_interrupt(driver.interrupt.get()) {
                driver.interrupt.set(before);
                return Err(CommandError::Store(e));
            }
            // A kept interrupt always has an alarm: whoever holds the
            // executor may die before carrying it out, after deciding its
            // alarm without it. Now: an alarm while the executor is held
            // only re-arms the watchdog, so no sooner alarm is put off.
            host.set_alarm(host.now_ms())
                .await
                .map_err(CommandError::Store)?;
            Ok(CommandAnswer {
                status,
                pending: true,
                drive: false,
            })
        }
        CommandGate::Refused(why) => Err(CommandError::Conflict(why)),
        CommandGate::Apply => {
            let result = apply_command(driver, host, cmd).await;
            let after = driver.end_command(result.as_ref().ok().copied());
            match after {
                AfterCommand::DeleteAlarm => {
                    let _ = host.delete_alarm().await;
                }
                // Refused, yet something arrived meanwhile (an event, an
                // interrupt answered "pending"): the host drives only on
                // success, so the alarm does.
                AfterCommand::Drive if result.is_err() => {
                    let _ = host.set_alarm(host.now_ms()).await;
                }
                _ => {}
            }
            result.map(|status| answer_applied(driver, status, after))
        }
    }
}

/// An applied command's answer. A pause or terminate that arrived while it
/// was applied (answered "pending") stands over it: the drive its end asks
/// for carries that out, so the answer names it, as the pending answer did,
/// and the operator is never last told "running" of an instance about to
/// stop.
fn answer_applied(driver: &Driver, status: Status, after: AfterCommand) -> CommandAnswer {
    let drive = after == AfterCommand::Drive;
    match driver.interrupt.get() {
        Some(stands) if !status.is_terminal() => CommandAnswer {
            status: stands.status(),
            pending: true,
            drive,
        },
        _ => CommandAnswer {
            status,
            pending: false,
            drive,
        },
    }
}

/// How a command was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandAnswer {
    pub status: Status,
    /// The running pass takes `status` at its next durable call.
    pub pending: bool,
    /// The host must start `drive` now.
    pub drive: bool,
}
