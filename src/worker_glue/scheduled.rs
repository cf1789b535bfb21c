//! The cron handler: builds the sweep's services from the Worker's
//! bindings and runs `runs::sweep::Sweep` (the decisions live there).

use serde_json::Value;
use worker::Env;

use crate::engine::{Clock, CreateRequest, InstanceId, RunRegistry, Status};
use crate::runs::edge::scheduler::{FireReport, Scheduler};
use crate::runs::sweep::{Finalizer, Instances, Sweep, SweepReport};

use super::bindings;
use super::compose::run_env_parts;
use super::instances::{self, InstanceWaker};
use super::platform::{WorkerClock, D1};

/// The instances, through their Durable Objects.
struct ObjectInstances<'a> {
    env: &'a Env,
}

#[async_trait::async_trait(?Send)]
impl Instances for ObjectInstances<'_> {
    async fn poke(&self, create: &CreateRequest) -> Result<(), String> {
        instances::poke(self.env, create)
            .await
            .map_err(|e| e.message)
    }
    async fn purge(&self, id: &InstanceId) -> Result<(), String> {
        instances::purge(self.env, id).await.map_err(|e| e.message)
    }
}

/// Finalizes with the same registry a pass of that instance would use.
struct RegistryFinalizer<'a> {
    env: &'a Env,
    db: &'a D1,
}

#[async_trait::async_trait(?Send)]
impl Finalizer for RegistryFinalizer<'_> {
    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        let parts = run_env_parts(self.env);
        let registry = parts.registry(&WorkerClock, self.db, None);
        registry.finalize(run, instance_id, input, status).await
    }
}

pub async fn sweep(env: &Env) -> SweepReport {
    let db = match env.d1(bindings::DB) {
        Ok(d) => D1(d),
        Err(e) => {
            worker::console_error!("sweep: no D1 binding: {e}");
            return SweepReport::default();
        }
    };
    let retention_ms = bindings::retention_ms(env);
    let waker = InstanceWaker { env: env.clone() };
    let parts = run_env_parts(env);
    let sweep = Sweep {
        db: &db,
        instances: &ObjectInstances { env },
        waker: &waker,
        finalizer: &RegistryFinalizer { env, db: &db },
        blobs: parts.blobs_or_refusal(),
        retention_ms,
        preview_reconcile_ms: bindings::preview_reconcile_ms(env),
    };
    sweep.run(WorkerClock.now_ms()).await
}

/// Fires the schedules whose slot is due (`runs::schedule::Scheduler`).
pub async fn fire_schedules(env: &Env) -> FireReport {
    let db = match env.d1(bindings::DB) {
        Ok(d) => D1(d),
        Err(_) => return FireReport::default(),
    };
    let parts = run_env_parts(env);
    let github = parts.github(&WorkerClock);
    let scheduler = Scheduler {
        db: &db,
        github: &github,
        instances: &ObjectInstances { env },
    };
    scheduler.fire(WorkerClock.now_ms()).await
}
