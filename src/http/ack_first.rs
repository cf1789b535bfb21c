//! Acknowledgements before instance work, under a burst, in local
//! development only. A delivery's instances are created after its answer
//! (`webhook::Accepted::create_after`), and where objects share the
//! answering machine (`wrangler dev` runs the Worker, its objects and local
//! D1 on one thread beside wrangler's own processes) each creation is
//! ~11 ms of CPU while an answer is ~2 ms: a monorepo's fifty pull requests
//! at once would be answered behind one another's creations. So while
//! deliveries arrive as a burst the creations wait, looking again with a
//! growing step, and go when the burst ends or after `CREATE_DEFER_MAX_MS`,
//! whichever is first. Nothing is lost by waiting: each instance's row is
//! written before its answer, and an object never created is recreated by
//! the sweep.
//!
//! On Cloudflare the Worker only awaits each creation's RPC; the object's
//! CPU is spent on its own machine, so waiting buys the answers nothing
//! and costs each check up to 5 s before it shows in progress. The wait is
//! therefore behind `ACK_FIRST = "on"`, which `npm start` and the test and
//! bench stacks set and `wrangler.toml` does not (`docs/capacity.md` has
//! the figures both ways).

use std::cell::RefCell;
use std::collections::VecDeque;

/// Answered deliveries that create, within `BURST_WINDOW_MS`, that make a
/// burst: 16 in 250 ms is 64 a second, whose creations alone (~11 ms
/// each) would take ~70% of the thread the answers need. Ordinary traffic
/// is a few a minute per repository. Only verified deliveries that create
/// count: a flood of bad signatures or ignored events delays nothing.
pub const BURST_ARRIVALS: usize = 16;
pub const BURST_WINDOW_MS: i64 = 250;
/// The first look again: a few answers' time.
pub const CREATE_YIELD_FIRST_MS: i64 = 10;
/// The longest step between looks, so a burst's end starts the waiting
/// creations within 160 ms; a waiter looks 10-35 times in a 1-5 s burst.
pub const CREATE_YIELD_STEP_MAX_MS: i64 = 160;
/// A creation waits at most this long however long the burst lasts, so
/// its check shows in progress within seconds; Cloudflare keeps a
/// `waitUntil` for 30 s after the answer, this stays well inside it.
pub const CREATE_DEFER_MAX_MS: i64 = 5_000;

/// Whether creations wait for a burst's answers: only with `ACK_FIRST`
/// set to `on` (local development); unset or anything else, never.
pub fn enabled(ack_first: Option<&str>) -> bool {
    ack_first.is_some_and(|v| v.trim().eq_ignore_ascii_case("on"))
}

/// How long answered creations wait before looking again, given whether
/// deliveries arrive as a burst now and how long the creations waited
/// already; None: create now.
pub fn create_yield_ms(burst: bool, waited_ms: i64) -> Option<i64> {
    if !burst || waited_ms >= CREATE_DEFER_MAX_MS {
        return None;
    }
    let step = waited_ms.clamp(CREATE_YIELD_FIRST_MS, CREATE_YIELD_STEP_MAX_MS);
    Some(step.min(CREATE_DEFER_MAX_MS - waited_ms))
}

/// The isolate's recent delivery arrivals (one per isolate, shared by its
/// requests; the isolate is single-threaded): the last `BURST_ARRIVALS`.
#[derive(Debug, Default)]
pub struct Arrivals {
    recent_ms: RefCell<VecDeque<i64>>,
}

impl Arrivals {
    pub fn arrived(&self, now_ms: i64) {
        let mut recent = self.recent_ms.borrow_mut();
        if recent.len() == BURST_ARRIVALS {
            recent.pop_front();
        }
        recent.push_back(now_ms);
    }

    /// True while the last `BURST_ARRIVALS` deliveries all arrived within
    /// `BURST_WINDOW_MS` of now.
    pub fn in_burst(&self, now_ms: i64) -> bool {
        let recent = self.recent_ms.borrow();
        recent.len() == BURST_ARRIVALS
            && recent
                .front()
                .is_some_and(|&first| now_ms - first <= BURST_WINDOW_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burst deferral helps only where the objects share the Worker's
    /// thread: it is off unless local development turns it on, and the
    /// production configuration leaves it off.
    #[test]
    fn burst_deferral_is_off_unless_local_development_turns_it_on() {
        assert!(!enabled(None));
        assert!(!enabled(Some("off")));
        assert!(!enabled(Some("")));
        assert!(!enabled(Some("yes")), "only the documented value");
        assert!(enabled(Some("on")));
        assert!(enabled(Some(" ON ")));
        let root = env!("CARGO_MANIFEST_DIR");
        let read = |path: &str| {
            std::fs::read_to_string(format!("{root}/{path}"))
                .unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let production = read("wrangler.toml");
        let vars = production
            .split("\n[vars]")
            .nth(1)
            .expect("wrangler.toml has [vars]");
        assert!(
            vars.lines()
                .any(|l| l.replace(' ', "") == "ACK_FIRST=\"off\""),
            "wrangler.toml's [vars] sets ACK_FIRST = \"off\""
        );
        for local in ["scripts/start.mjs", "tools/stack/stack.mjs"] {
            assert!(
                read(local).contains("ACK_FIRST: 'on'"),
                "{local} turns burst deferral on for wrangler dev"
            );
        }
    }

    #[test]
    fn outside_a_burst_creations_go_at_once() {
        assert_eq!(create_yield_ms(false, 0), None);
        assert_eq!(create_yield_ms(false, 40), None);
    }

    #[test]
    fn in_a_burst_the_steps_grow_and_the_wait_is_bounded() {
        let mut waited = 0;
        let mut steps = Vec::new();
        while let Some(ms) = create_yield_ms(true, waited) {
            assert!(ms > 0, "a step that waits nothing would spin");
            steps.push(ms);
            waited += ms;
            assert!(steps.len() < 1_000, "the wait never ended");
        }
        assert_eq!(waited, CREATE_DEFER_MAX_MS);
        assert_eq!(&steps[..5], &[10, 10, 20, 40, 80]);
        assert!(steps.iter().all(|&s| s <= CREATE_YIELD_STEP_MAX_MS));
        // Non-decreasing but for the last, which ends the wait at the bound.
        let growing = &steps[..steps.len() - 1];
        assert!(growing.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    }

    #[test]
    fn a_burst_is_arrivals_close_together_and_ends_when_they_stop() {
        let arrivals = Arrivals::default();
        for i in 0..BURST_ARRIVALS as i64 - 1 {
            arrivals.arrived(1_000 + i);
        }
        assert!(!arrivals.in_burst(1_100), "one arrival short of a burst");
        arrivals.arrived(1_100);
        assert!(arrivals.in_burst(1_100));
        assert!(arrivals.in_burst(1_000 + BURST_WINDOW_MS));
        assert!(
            !arrivals.in_burst(1_001 + BURST_WINDOW_MS),
            "the oldest fell out of the window"
        );
    }

    #[test]
    fn steady_traffic_just_slower_than_a_burst_never_is_one() {
        let gap = BURST_WINDOW_MS / (BURST_ARRIVALS as i64 - 1) + 1;
        let steady = Arrivals::default();
        for i in 0..100 {
            steady.arrived(i * gap);
            assert!(!steady.in_burst(i * gap), "arrival {i}");
        }
        let faster = Arrivals::default();
        for i in 0..BURST_ARRIVALS as i64 {
            faster.arrived(i * (gap - 1));
        }
        assert!(faster.in_burst((BURST_ARRIVALS as i64 - 1) * (gap - 1)));
    }
}
