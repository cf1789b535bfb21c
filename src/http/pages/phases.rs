//! An execution's steps grouped into the phases a person knows (waiting for
//! the group and admission, checkout and config, the command, the report),
//! each with its duration, and drawn to scale: one bar per step, its offset
//! and width the step's share of the run's time.
//!
//! The widths are SVG geometry (`<rect x="12.5%" width="40.0%">`), not
//! `style` attributes: the pages' Content-Security-Policy (`style-src
//! 'self'`) refuses inline styles, and geometry is not style. Colours and
//! sizes are in `assets/app.css`.

use crate::runs::approval::human_wait_of;
use crate::runs::command::{CHECK_COMMAND_STEP, DEPLOY_COMMAND_STEP};
use crate::runs::deployment::CREATE_STEP as CREATE_DEPLOYMENT_STEP;
use crate::runs::gate::is_gate_step;

use super::escape::Html;
use super::layout::cell;
use super::time;
use super::StepView;

/// A phase of a run, as a person reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The gates (the serial group, admission, a sandbox slot) and a
    /// person's approval: the run waits its turn.
    Admission,
    /// Reading the config and the revision to build.
    Setup,
    /// The check's or the deploy's command in the sandbox.
    Command,
    /// The check run, the GitHub deployment, notifications.
    Report,
    /// Any other step: the engine's own.
    Engine,
}

/// Steps named in the runs (`.step("...")` in `src/runs/`) and their
/// phase; gate steps and human waits are recognised by their modules.
const NAMED: [(&str, Phase); 15] = [
    ("approval deadline", Phase::Admission),
    ("check decider", Phase::Admission),
    ("read config", Phase::Setup),
    ("read pull request head", Phase::Setup),
    ("supersede older heads", Phase::Setup),
    ("re-read head", Phase::Setup),
    ("grant environment", Phase::Setup),
    (CHECK_COMMAND_STEP, Phase::Command),
    (DEPLOY_COMMAND_STEP, Phase::Command),
    ("command still running", Phase::Command),
    ("create check run", Phase::Report),
    ("start check run", Phase::Report),
    ("complete check run", Phase::Report),
    (CREATE_DEPLOYMENT_STEP, Phase::Report),
    ("notify", Phase::Report),
];

/// The GitHub deployment's status steps (`runs::deployment`).
const DEPLOYMENT_STEP_PREFIX: &str = "deployment: ";

impl Phase {
    /// In the order the page lists them.
    pub const ALL: [Phase; 5] = [
        Phase::Admission,
        Phase::Setup,
        Phase::Command,
        Phase::Report,
        Phase::Engine,
    ];

    /// The phase of a timeline step (`name` or `name#3`).
    pub fn of(step_name: &str) -> Phase {
        let base = base_name(step_name);
        if is_gate_step(base) || human_wait_of(base).is_some() {
            return Phase::Admission;
        }
        if base.starts_with(DEPLOYMENT_STEP_PREFIX) {
            return Phase::Report;
        }
        if crate::runs::command::is_job_step_work(base) {
            return Phase::Command;
        }
        NAMED
            .iter()
            .find(|(name, _)| *name == base)
            .map_or(Phase::Engine, |(_, phase)| *phase)
    }

    pub fn label(self) -> &'static str {
        match self {
            Phase::Admission => "Waiting for the group and admission",
            Phase::Setup => "Checkout and config",
            Phase::Command => "Command",
            Phase::Report => "Report",
            Phase::Engine => "Engine",
        }
    }

    /// Its class in `app.css` (`ph-command`).
    pub fn class(self) -> &'static str {
        match self {
            Phase::Admission => "ph-admission",
            Phase::Setup => "ph-setup",
            Phase::Command => "ph-command",
            Phase::Report => "ph-report",
            Phase::Engine => "ph-engine",
        }
    }
}

/// A timeline name without its occurrence count (`execution_steps` names
/// a repeated step `name#3`).
pub fn base_name(name: &str) -> &str {
    match name.rsplit_once('#') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// A bar on the timeline, in tenths of a percent of the run's time: where
/// it starts and how wide it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    pub x_permille: i64,
    pub width_permille: i64,
}

impl Bar {
    /// A span of `[start_ms, end_ms)` within the run's `[run_start_ms,
    /// run_end_ms)`, clipped to it. None when the run has no length.
    pub fn of(start_ms: i64, end_ms: i64, run_start_ms: i64, run_end_ms: i64) -> Option<Bar> {
        let span = i128::from(run_end_ms) - i128::from(run_start_ms);
        if span <= 0 {
            return None;
        }
        let at = |ms: i64| {
            let off = (i128::from(ms) - i128::from(run_start_ms)).clamp(0, span);
            i64::try_from(off * 1000 / span).unwrap_or(0)
        };
        let x = at(start_ms);
        Some(Bar {
            x_permille: x,
            width_permille: at(end_ms.max(start_ms)) - x,
        })
    }
}

/// `37.5%`.
pub fn percent(permille: i64) -> String {
    format!("{}.{}%", permille / 10, permille % 10)
}

/// One phase of one execution: its steps (in timeline order) and the time
/// they took together.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSpan<'a> {
    pub phase: Phase,
    pub steps: Vec<&'a StepView>,
    pub duration_ms: i64,
}

/// Where a step ends on the timeline: its finish, or now while it runs.
fn step_end_ms(s: &StepView, now_ms: i64) -> i64 {
    s.row.finished_ms.unwrap_or(now_ms).max(s.row.started_ms)
}

/// The phases that have steps, in [`Phase::ALL`] order.
pub fn group(steps: &[StepView], now_ms: i64) -> Vec<PhaseSpan<'_>> {
    Phase::ALL
        .into_iter()
        .filter_map(|phase| {
            let steps: Vec<&StepView> = steps
                .iter()
                .filter(|s| Phase::of(&s.row.name) == phase)
                .collect();
            let duration_ms = steps
                .iter()
                .map(|s| step_end_ms(s, now_ms) - s.row.started_ms)
                .sum();
            (!steps.is_empty()).then_some(PhaseSpan {
                phase,
                steps,
                duration_ms,
            })
        })
        .collect()
}

/// The phases section: a row per phase with its duration, its bars to
/// scale within `[run_start_ms, run_end_ms)`, and its steps' names.
pub(crate) fn section(
    h: &mut Html,
    steps: &[StepView],
    run_start_ms: i64,
    run_end_ms: i64,
    now_ms: i64,
) {
    h.raw("<section id=\"phases\" data-live><h2>Phases</h2>");
    let spans = group(steps, now_ms);
    if spans.is_empty() {
        h.raw("<p class=\"empty\">No steps yet.</p></section>");
        return;
    }
    h.raw("<table class=\"phases\"><thead><tr><th>Phase</th><th>Duration</th>")
        .raw("<th>Timeline</th><th>Steps</th></tr></thead><tbody>");
    for span in &spans {
        h.raw("<tr class=\"phase ")
            .raw(span.phase.class())
            .raw("\">");
        cell(h, "Phase", |h| {
            h.raw(span.phase.label());
        });
        cell(h, "Duration", |h| {
            h.text(&time::duration(span.duration_ms));
        });
        cell(h, "Timeline", |h| {
            bars(h, span, run_start_ms, run_end_ms, now_ms)
        });
        cell(h, "Steps", |h| step_names(h, &span.steps));
        h.raw("</tr>");
    }
    h.raw("</tbody></table></section>");
}

/// One `<rect>` per step of the phase, at its offset, as wide as its share
/// of the run.
fn bars(h: &mut Html, span: &PhaseSpan<'_>, run_start_ms: i64, run_end_ms: i64, now_ms: i64) {
    h.raw("<svg class=\"bars\" role=\"img\"")
        .attr("aria-label", &time::duration(span.duration_ms))
        .raw(">");
    for s in &span.steps {
        let end = step_end_ms(s, now_ms);
        let Some(bar) = Bar::of(s.row.started_ms, end, run_start_ms, run_end_ms) else {
            continue;
        };
        h.raw("<rect")
            .attr("x", &percent(bar.x_permille))
            .attr("width", &percent(bar.width_permille))
            .raw(" y=\"0\" height=\"100%\"><title>")
            .text(&s.row.name)
            .raw(" · ")
            .text(&time::duration(end - s.row.started_ms))
            .raw("</title></rect>");
    }
    h.raw("</svg>");
}

/// The phase's step names, each once, in order.
fn step_names(h: &mut Html, steps: &[&StepView]) {
    let mut seen: Vec<&str> = Vec::new();
    for s in steps {
        let base = base_name(&s.row.name);
        if seen.contains(&base) {
            continue;
        }
        if !seen.is_empty() {
            h.raw(", ");
        }
        seen.push(base);
        h.raw("<code>").text(base).raw("</code>");
    }
}
