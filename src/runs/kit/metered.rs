//! A run's services with the billed ones counted into its instance's
//! `cost::Meter` (`Registry::meter`): D1, R2, the GitHub API and the
//! sandbox. Built per call of the registry, so nothing outlives a pass.

use crate::cost::Meter;
use crate::github::metered::MeteredTransport;
use crate::github::GitHub;
use crate::sandbox::metered::MeteredSandbox;
use crate::store::metered::{MeteredBlobs, MeteredDb};

use super::RunEnv;

pub struct Metered<'a> {
    db: MeteredDb<'a>,
    github: MeteredTransport<'a>,
    sandbox: MeteredSandbox<'a>,
    blobs: MeteredBlobs<'a>,
}

impl<'a> Metered<'a> {
    pub fn new(env: &RunEnv<'a>, meter: &'a Meter) -> Metered<'a> {
        Metered {
            db: MeteredDb {
                inner: env.db,
                meter,
            },
            github: MeteredTransport {
                inner: env.github.transport,
                meter,
            },
            sandbox: MeteredSandbox {
                inner: env.sandbox,
                meter,
                clock: env.clock,
            },
            blobs: MeteredBlobs {
                inner: env.blobs,
                meter,
            },
        }
    }

    /// `env` with its billed services replaced by the counted ones.
    pub fn env<'b>(&'b self, env: &RunEnv<'a>) -> RunEnv<'b>
    where
        'a: 'b,
    {
        RunEnv {
            clock: env.clock,
            http: env.http,
            github: GitHub {
                transport: &self.github,
                signer: env.github.signer,
                clock: env.github.clock,
                api_url: env.github.api_url.clone(),
                app_id: env.github.app_id.clone(),
                key_der: env.github.key_der.clone(),
            },
            sandbox: &self.sandbox,
            archives: env.archives,
            blobs: &self.blobs,
            db: &self.db,
            waker: env.waker,
            terminator: env.terminator,
            spawner: env.spawner,
            secrets: env.secrets,
            environments: env.environments,
            git_url: env.git_url.clone(),
            notify: env.notify.clone(),
            pool_capacity: env.pool_capacity,
            checks_capacity: env.checks_capacity,
            checks_per_repo: env.checks_per_repo,
            public_url: env.public_url.clone(),
            log_link_secret: env.log_link_secret.clone(),
            cache_bytes_per_repo: env.cache_bytes_per_repo,
        }
    }
}
