//! Structured logs: one JSON object per line per event, for Workers Logs
//! (which indexes the fields of a JSON line). The logic builds events with
//! [`event`] and emits them; where the lines go is a [`LogSink`] the Worker
//! glue installs at start (`console.log`, `console.warn`, `console.error`),
//! and tests install one that records. With no sink nothing is written.
//!
//! Every event names what it is about when known: `instance_id`, `run`,
//! `repo`, and `request_id` for events a request caused. Fields are only
//! what callers pass, never a request body, a header or a secret: an
//! event's fields are ids, names, statuses, tags, counts and times; error
//! messages are clipped (the journal and D1 hold them whole, already
//! scrubbed of secrets by the runs).
//!
//! Architecture invariant: no `worker` types; a leaf (uses nothing of the
//! crate), so every layer may log.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::{Map, Value};

/// What kind of event a line is: its `event` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A signed webhook delivery was accepted (or recognised as a redelivery).
    DeliveryReceived,
    /// An instance was created (not found: an existing id creates nothing).
    InstanceCreated,
    /// An executor pass ended.
    Pass,
    /// A step attempt failed (`final`: it will not be retried).
    StepFailed,
    /// A gate changed hands: a serial group, a pool slot, a sandbox lease.
    GateTransition,
    /// An instance ended skipped (its reason, or an operator's silent skip).
    Skip,
    /// An operator acted through the API or the dashboard.
    OperatorAction,
    /// A request to the API or the dashboard was refused for its credentials.
    AuthRefused,
    /// A request failed inside Sluice (a 5xx; the answer names the request id).
    ServerError,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::DeliveryReceived => "delivery_received",
            Kind::InstanceCreated => "instance_created",
            Kind::Pass => "pass",
            Kind::StepFailed => "step_failed",
            Kind::GateTransition => "gate_transition",
            Kind::Skip => "skip",
            Kind::OperatorAction => "operator_action",
            Kind::AuthRefused => "auth_refused",
            Kind::ServerError => "server_error",
        }
    }

    pub fn level(self) -> Level {
        match self {
            Kind::StepFailed | Kind::AuthRefused => Level::Warn,
            Kind::ServerError => Level::Error,
            _ => Level::Info,
        }
    }
}

/// A line's severity, least first (the order `LOG_LEVEL` filters by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// `LOG_LEVEL`'s value: `info`, `warn` or `error`, any case.
    pub fn parse(s: &str) -> Option<Level> {
        [Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|l| s.trim().eq_ignore_ascii_case(l.as_str()))
    }
}

/// Where lines go.
pub trait LogSink {
    fn write(&self, level: Level, line: &str);
}

thread_local! {
    // One sink per thread: the Worker has one; each native test thread
    // installs its own, so parallel tests do not see each other's lines.
    static SINK: RefCell<Option<Rc<dyn LogSink>>> = const { RefCell::new(None) };
    // The least severe level written: every line by default.
    static MIN_LEVEL: Cell<Level> = const { Cell::new(Level::Info) };
}

/// Writes only lines of `level` or more severe from now on, on this thread
/// (the Worker's `LOG_LEVEL`: Workers Logs bills per line, and a busy
/// installation may keep only warnings and errors).
pub fn set_min_level(level: Level) {
    MIN_LEVEL.with(|m| m.set(level));
}

/// Installs the sink every later event on this thread is written to.
pub fn set_sink(sink: Rc<dyn LogSink>) {
    SINK.with(|s| *s.borrow_mut() = Some(sink));
}

/// Whether a sink is installed.
pub fn has_sink() -> bool {
    SINK.with(|s| s.borrow().is_some())
}

/// Characters of an error message a line carries: enough to recognise it,
/// short enough that a line stays one screen (D1 and the journal keep it
/// whole).
pub const MESSAGE_CHARS_MAX: usize = 300;

/// An event being built: `event(Kind::Pass).instance(..).field(..).emit()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    kind: Kind,
    level: Level,
    fields: Map<String, Value>,
}

/// Starts an event of `kind`.
pub fn event(kind: Kind) -> Event {
    let mut fields = Map::new();
    fields.insert("event".into(), Value::from(kind.as_str()));
    fields.insert("level".into(), Value::from(kind.level().as_str()));
    Event {
        kind,
        level: kind.level(),
        fields,
    }
}

/// What an instance event is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    pub instance_id: String,
    pub run: Option<String>,
    pub repo: Option<String>,
}

impl Event {
    /// Sets `key` (null values are left out).
    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Event {
        let v = value.into();
        if !v.is_null() {
            self.fields.insert(key.to_owned(), v);
        }
        self
    }

    /// An error message, clipped to `MESSAGE_CHARS_MAX` characters.
    pub fn message(self, key: &str, text: &str) -> Event {
        let mut clipped: String = text.chars().take(MESSAGE_CHARS_MAX).collect();
        if clipped.len() < text.len() {
            clipped.push('…');
        }
        self.field(key, clipped)
    }

    /// `instance_id`, `run` and `repo`.
    pub fn about(self, s: &Subject) -> Event {
        self.field("instance_id", s.instance_id.as_str())
            .field("run", s.run.clone())
            .field("repo", s.repo.clone())
    }

    pub fn request(self, request_id: &str) -> Event {
        self.field("request_id", request_id)
    }

    /// The line as written.
    pub fn line(&self) -> String {
        Value::Object(self.fields.clone()).to_string()
    }

    /// Raises the line's level to at least `level` (a pass whose index
    /// write failed is a warning, whatever a pass usually is).
    pub fn at_least(mut self, level: Level) -> Event {
        if level > self.level {
            self.level = level;
            self.fields
                .insert("level".into(), Value::from(level.as_str()));
        }
        self
    }

    /// Writes the line to the installed sink, if any. `LOG_LEVEL` drops
    /// lines below it, never an operator's action (the audit trail).
    pub fn emit(self) {
        let audit = self.kind == Kind::OperatorAction;
        if self.level < MIN_LEVEL.with(Cell::get) && !audit {
            return;
        }
        let sink = SINK.with(|s| s.borrow().clone());
        if let Some(sink) = sink {
            sink.write(self.level, &self.line());
        }
    }
}

/// A sink that keeps every line (tests, and the native fakes).
#[derive(Debug, Default)]
pub struct Recorder {
    lines: RefCell<Vec<String>>,
}

impl Recorder {
    /// A recorder installed as this thread's sink.
    pub fn install() -> Rc<Recorder> {
        let r = Rc::new(Recorder::default());
        set_sink(r.clone());
        r
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }

    /// The recorded events, parsed.
    pub fn events(&self) -> Vec<Map<String, Value>> {
        self.lines
            .borrow()
            .iter()
            .filter_map(|l| match serde_json::from_str(l) {
                Ok(Value::Object(m)) => Some(m),
                _ => None,
            })
            .collect()
    }

    /// The recorded events of one kind.
    pub fn of(&self, kind: Kind) -> Vec<Map<String, Value>> {
        self.events()
            .into_iter()
            .filter(|e| e.get("event").and_then(Value::as_str) == Some(kind.as_str()))
            .collect()
    }
}

impl LogSink for Recorder {
    fn write(&self, _level: Level, line: &str) {
        self.lines.borrow_mut().push(line.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_object_per_line_with_its_subject() {
        let rec = Recorder::install();
        let who = Subject {
            instance_id: "check-o-r-abc".into(),
            run: Some("check".into()),
            repo: Some("o/r".into()),
        };
        event(Kind::StepFailed)
            .about(&who)
            .request("ray-1")
            .field("step", "run command")
            .field("attempt", 2)
            .field("absent", Value::Null)
            .message("error", &"x\n".repeat(400))
            .emit();
        let lines = rec.lines();
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].contains('\n'), "one line");
        let e = &rec.of(Kind::StepFailed)[0];
        assert_eq!(e["level"], "warn");
        assert_eq!(e["instance_id"], "check-o-r-abc");
        assert_eq!(e["run"], "check");
        assert_eq!(e["repo"], "o/r");
        assert_eq!(e["request_id"], "ray-1");
        assert_eq!(e["attempt"], 2);
        assert!(!e.contains_key("absent"));
        let error = e["error"].as_str().unwrap_or_default();
        assert_eq!(error.chars().count(), MESSAGE_CHARS_MAX + 1);
    }

    #[test]
    fn log_level_keeps_only_lines_at_least_as_severe() {
        let rec = Recorder::install();
        assert_eq!(Level::parse(" WARN "), Some(Level::Warn));
        assert_eq!(Level::parse("debug"), None);
        set_min_level(Level::Warn);
        event(Kind::Pass).emit();
        event(Kind::StepFailed).emit();
        event(Kind::ServerError).emit();
        set_min_level(Level::Error);
        event(Kind::StepFailed).emit();
        event(Kind::ServerError).emit();
        // An operator's action is the audit trail: kept at any level; a
        // raised line is filtered by its raised level.
        event(Kind::OperatorAction).emit();
        event(Kind::Pass).at_least(Level::Error).emit();
        event(Kind::Pass).at_least(Level::Warn).emit();
        set_min_level(Level::Info);
        event(Kind::Pass).emit();
        let levels: Vec<String> = rec
            .events()
            .iter()
            .map(|e| e["level"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(levels, ["warn", "error", "error", "info", "error", "info"]);
    }
}
