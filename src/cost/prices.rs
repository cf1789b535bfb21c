//! The price table: Cloudflare's published unit prices (Workers Paid plan,
//! USD, the marginal price beyond each monthly allowance), taken on
//! 2026-12-01 from these pages:
//!
//! - Workers: <https://developers.cloudflare.com/workers/platform/pricing/>
//!   ($0.30 per million requests, $0.02 per million CPU ms).
//! - Durable Objects: <https://developers.cloudflare.com/durable-objects/platform/pricing/>
//!   (requests, alarms included, $0.15 per million; duration $12.50 per
//!   million GB-s at the fixed 128 MB; SQLite storage rows read $0.001 and
//!   rows written $1.00 per million).
//! - D1: <https://developers.cloudflare.com/d1/platform/pricing/> (rows
//!   read $0.001 per million, rows written $1.00 per million).
//! - R2: <https://developers.cloudflare.com/r2/pricing/> (standard storage:
//!   class A $4.50 per million, class B $0.36 per million).
//! - Containers: <https://developers.cloudflare.com/containers/pricing/>
//!   ($0.000020 per vCPU-s of active CPU, $0.0000025 per GiB-s of
//!   provisioned memory).
//! - Workflows: <https://developers.cloudflare.com/workflows/reference/pricing/>
//!   (Workers Standard requests and CPU, plus, since step billing began on
//!   2026-08-10, $0.80 per 100,000 steps beyond the 500,000 included a
//!   month; ADR-0001 records the same figures, verified 2026-08-06).
//!
//! Allowances are not subtracted: the figures are what one more execution
//! costs once a month's included usage is spent, which is what scales.
//! CPU time is not counted on either side (an isolate cannot measure its
//! own CPU), so neither model charges it.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use serde::Serialize;

use super::CostUnits;

/// When the prices below were read from the pages above.
pub const PRICES_TAKEN: &str = "2026-12-01";

const PER_MILLION: f64 = 1_000_000.0;

/// Workers: one request per webhook delivery (and per API call).
pub const WORKERS_REQUEST_USD: f64 = 0.30 / PER_MILLION;
/// Durable Objects: a request (fetch, RPC session or alarm).
pub const DO_REQUEST_USD: f64 = 0.15 / PER_MILLION;
/// Durable Objects: a GB-second of wall-clock duration while active.
pub const DO_GB_SECOND_USD: f64 = 12.50 / PER_MILLION;
/// The memory every Durable Object is billed at, whatever it uses.
pub const DO_BILLED_GB: f64 = 0.128;
/// Durable Object SQLite storage and D1 bill rows alike.
pub const ROW_READ_USD: f64 = 0.001 / PER_MILLION;
pub const ROW_WRITTEN_USD: f64 = 1.00 / PER_MILLION;
/// R2 standard storage operations.
pub const R2_CLASS_A_USD: f64 = 4.50 / PER_MILLION;
pub const R2_CLASS_B_USD: f64 = 0.36 / PER_MILLION;
/// Containers: active vCPU-seconds and provisioned GiB-seconds.
pub const CONTAINER_VCPU_SECOND_USD: f64 = 0.000_020;
pub const CONTAINER_GIB_SECOND_USD: f64 = 0.000_002_5;
/// The sandbox instance wrangler.toml provisions: it names no
/// `instance_type`, so the default "lite" (1/16 vCPU, 256 MiB), charged for
/// every sandbox second as if its vCPU were busy (an upper bound:
/// Containers bill active CPU only).
pub const SANDBOX_VCPU: f64 = 1.0 / 16.0;
pub const SANDBOX_GIB: f64 = 0.25;
/// Workflows: a step beyond the included ones.
pub const WORKFLOWS_STEP_USD: f64 = 0.80 / 100_000.0;

/// Dollars by product for some units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Dollars {
    pub durable_objects: f64,
    pub d1: f64,
    pub r2: f64,
    pub containers: f64,
    pub total: f64,
}

/// What `units` cost on Cloudflare's bill. GitHub API calls cost no money
/// (they spend the installation's rate limit), so they price at zero.
pub fn dollars(units: &CostUnits) -> Dollars {
    let n = |v: u64| v as f64;
    let durable_objects = n(units.do_requests) * DO_REQUEST_USD
        + n(units.do_active_ms) / 1_000.0 * DO_BILLED_GB * DO_GB_SECOND_USD
        + n(units.do_rows_read) * ROW_READ_USD
        + n(units.do_rows_written) * ROW_WRITTEN_USD;
    let d1 = n(units.d1_rows_read) * ROW_READ_USD + n(units.d1_rows_written) * ROW_WRITTEN_USD;
    let r2 = n(units.r2_class_a) * R2_CLASS_A_USD + n(units.r2_class_b) * R2_CLASS_B_USD;
    let containers = n(units.sandbox_ms) / 1_000.0
        * (SANDBOX_VCPU * CONTAINER_VCPU_SECOND_USD + SANDBOX_GIB * CONTAINER_GIB_SECOND_USD);
    Dollars {
        durable_objects,
        d1,
        r2,
        containers,
        total: durable_objects + d1 + r2 + containers,
    }
}

/// The same executions modeled on Cloudflare Workflows: each instance one
/// Workflows invocation, each durable call (step, sleep, wait) one billed
/// step; the run's own D1, R2 and sandbox work would be the same there, so
/// only the engine's share (Durable Object requests, duration and journal
/// rows) is replaced by the step charge.
pub fn workflows_dollars(units: &CostUnits, executions: u64, steps: u64) -> f64 {
    let own = dollars(units);
    own.d1
        + own.r2
        + own.containers
        + executions as f64 * WORKERS_REQUEST_USD
        + steps as f64 * WORKFLOWS_STEP_USD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_of_each_unit_costs_its_published_price() {
        let only = |f: fn(&mut CostUnits)| {
            let mut u = CostUnits::default();
            f(&mut u);
            dollars(&u).total
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(only(|u| u.do_requests = 1_000_000), 0.15));
        assert!(close(only(|u| u.d1_rows_written = 1_000_000), 1.00));
        assert!(close(only(|u| u.d1_rows_read = 1_000_000), 0.001));
        assert!(close(only(|u| u.r2_class_a = 1_000_000), 4.50));
        assert!(close(only(|u| u.r2_class_b = 1_000_000), 0.36));
        assert!(close(only(|u| u.github_calls = 1_000_000), 0.0));
        // 1,000 s of a lite sandbox: 62.5 vCPU-s and 250 GiB-s.
        assert!(close(
            only(|u| u.sandbox_ms = 1_000_000),
            0.00125 + 0.000625
        ));
        // 1,000 s of one Durable Object active: 128 GB-s.
        assert!(close(only(|u| u.do_active_ms = 1_000_000), 0.0016));
        assert!(close(
            workflows_dollars(&CostUnits::default(), 0, 100_000),
            0.80
        ));
    }
}
