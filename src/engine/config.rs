//! Step configuration: retries with backoff, and a timeout. Defaults are in
//! `limits.rs` and documented in ARCHITECTURE.md.

use serde::{Deserialize, Serialize};

use crate::limits::{
    STEP_RETRY_DELAY_MS_DEFAULT, STEP_RETRY_DELAY_MS_MAX, STEP_RETRY_LIMIT_DEFAULT,
    STEP_TIMEOUT_MS_DEFAULT,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backoff {
    /// Every retry waits `delay`.
    Constant,
    /// Retry n waits `n * delay`.
    Linear,
    /// Retry n waits `delay * 2^(n-1)`.
    Exponential,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retries {
    /// Retries after the first attempt (0: one attempt only).
    pub limit: u32,
    pub delay_ms: i64,
    pub backoff: Backoff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepConfig {
    pub retries: Retries,
    /// Wall-clock bound of one attempt.
    pub timeout_ms: i64,
}

impl Default for StepConfig {
    /// 5 retries, 1 s exponential backoff, 10 minute timeout per attempt.
    fn default() -> Self {
        StepConfig {
            retries: Retries {
                limit: STEP_RETRY_LIMIT_DEFAULT,
                delay_ms: STEP_RETRY_DELAY_MS_DEFAULT,
                backoff: Backoff::Exponential,
            },
            timeout_ms: STEP_TIMEOUT_MS_DEFAULT,
        }
    }
}

impl StepConfig {
    /// One attempt, no retry: for steps whose failure is the answer.
    pub fn once() -> Self {
        StepConfig {
            retries: Retries {
                limit: 0,
                ..StepConfig::default().retries
            },
            ..Self::default()
        }
    }

    pub fn retries(mut self, limit: u32, delay_ms: i64, backoff: Backoff) -> Self {
        self.retries = Retries {
            limit,
            delay_ms,
            backoff,
        };
        self
    }

    pub fn timeout_ms(mut self, timeout_ms: i64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    /// The wait before retry number `retry` (1-based), capped.
    pub fn delay_before_retry_ms(&self, retry: u32) -> i64 {
        let d = self.retries.delay_ms.max(0);
        let ms = match self.retries.backoff {
            Backoff::Constant => d,
            Backoff::Linear => d.saturating_mul(i64::from(retry)),
            Backoff::Exponential => {
                let shift = retry.saturating_sub(1).min(40);
                d.saturating_mul(1i64 << shift)
            }
        };
        ms.min(STEP_RETRY_DELAY_MS_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_shapes() {
        let c = StepConfig::default().retries(5, 100, Backoff::Constant);
        let l = StepConfig::default().retries(5, 100, Backoff::Linear);
        let e = StepConfig::default().retries(5, 100, Backoff::Exponential);
        let seq = |c: &StepConfig| {
            (1..=4)
                .map(|r| c.delay_before_retry_ms(r))
                .collect::<Vec<_>>()
        };
        assert_eq!(seq(&c), [100, 100, 100, 100]);
        assert_eq!(seq(&l), [100, 200, 300, 400]);
        assert_eq!(seq(&e), [100, 200, 400, 800]);
        let huge = StepConfig::default().retries(90, 1_000, Backoff::Exponential);
        assert_eq!(huge.delay_before_retry_ms(80), STEP_RETRY_DELAY_MS_MAX);
    }
}
