//! Sluice: CI/CD runs for GitHub repositories on a Cloudflare account you
//! own. This file holds only the Worker's entry points; see ARCHITECTURE.md
//! for the map.

pub mod blobs;
pub mod clock;
pub mod cost;
pub mod engine;
pub mod gates;
pub mod github;
pub mod http;
pub mod journal;
pub mod limits;
pub mod net;
pub mod obs;
pub mod runs;
pub mod sandbox;
pub mod secret;
pub mod store;

#[cfg(target_arch = "wasm32")]
pub mod worker_glue;

#[cfg(target_arch = "wasm32")]
mod entry {
    use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

    #[event(start)]
    fn start() {
        console_error_panic_hook::set_once();
        crate::obs::set_sink(std::rc::Rc::new(crate::worker_glue::platform::ConsoleLog));
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
        crate::worker_glue::router::fetch(req, env, ctx).await
    }

    #[event(scheduled)]
    async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
        crate::worker_glue::bindings::apply_log_level(&env);
        let report = crate::worker_glue::scheduled::sweep(&env).await;
        worker::console_log!(
            "sweep: resumed {}, woke {}, finalized {}, purged {}, failed {}",
            report.resumed,
            report.woken,
            report.finalized,
            report.purged,
            report.failed
        );
        let fired = crate::worker_glue::scheduled::fire_schedules(&env).await;
        worker::console_log!(
            "schedules: fired {}, already live {}, failed {}",
            fired.fired,
            fired.live,
            fired.failed
        );
    }
}
