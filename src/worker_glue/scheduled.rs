//! The cron handler: the sweep that resumes overdue instances (a lost
//! alarm, a crashed executor) and purges instances past retention.

use worker::Env;

use crate::engine::{Clock, CreateRequest, InstanceId};
use crate::limits::{PURGE_BATCH_MAX, RETENTION_MS_DEFAULT, SWEEP_BATCH_MAX, SWEEP_OVERDUE_MS};
use crate::store::executions;

use super::bindings;
use super::handlers::{poke_instance, purge_instance};
use super::platform::{WorkerClock, D1};

/// Counts of one sweep, logged.
#[derive(Debug, Default)]
pub struct SweepReport {
    pub resumed: u32,
    pub purged: u32,
    pub failed: u32,
}

pub async fn sweep(env: &Env) -> SweepReport {
    let mut report = SweepReport::default();
    let db = match env.d1(bindings::DB) {
        Ok(d) => D1(d),
        Err(e) => {
            worker::console_error!("sweep: no D1 binding: {e}");
            return report;
        }
    };
    let now = WorkerClock.now_ms();
    match executions::overdue(&db, now - SWEEP_OVERDUE_MS, SWEEP_BATCH_MAX).await {
        Ok(rows) => {
            for row in rows {
                let create = CreateRequest {
                    key: row.key,
                    run: row.run,
                    input: serde_json::from_str(&row.input_json).unwrap_or(serde_json::Value::Null),
                    repo: row.repo,
                    entity: row.entity,
                    sha: row.sha,
                    max_steps: None,
                    max_duration_ms: None,
                };
                match poke_instance(env, &create).await {
                    Ok(()) => report.resumed += 1,
                    Err(e) => {
                        report.failed += 1;
                        worker::console_error!("sweep: resume {} failed: {}", row.id, e.message);
                    }
                }
            }
        }
        Err(e) => worker::console_error!("sweep: overdue query failed: {e}"),
    }
    let retention_ms = bindings::text(env, bindings::RETENTION_DAYS)
        .and_then(|d| d.parse::<i64>().ok())
        .map(|d| d * 24 * 3600 * 1000)
        .unwrap_or(RETENTION_MS_DEFAULT);
    match executions::finished_before(&db, now - retention_ms, PURGE_BATCH_MAX).await {
        Ok(ids) => {
            for id in ids {
                let Ok(iid) = InstanceId::parse(&id) else {
                    continue;
                };
                let purged = match purge_instance(env, &iid).await {
                    Ok(()) => executions::delete(&db, &id)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.message),
                };
                match purged {
                    Ok(()) => report.purged += 1,
                    Err(e) => {
                        report.failed += 1;
                        worker::console_error!("sweep: purge {id} failed: {e}");
                    }
                }
            }
        }
        Err(e) => worker::console_error!("sweep: retention query failed: {e}"),
    }
    report
}
