//! The composition root: builds the services runs use (`RunEnv`) from the
//! Worker's bindings, once per pass (or per sweep finalize).

use serde_json::Value;
use worker::Env;

use crate::cost::Meter;
use crate::engine::Clock;
use crate::github::app::private_key_pkcs8_der;
use crate::github::GitHub;
use crate::limits::{CONTAINER_INSTANCES_MAX, POOL_CAPACITY_MAX};
use crate::runs::environment::Environments;
use crate::runs::gate::check_capacities;
use crate::runs::{NotifyTarget, Registry, RunEnv, SecretSource};
use crate::sandbox::agent::AgentSandbox;
use crate::secret::Secret;
use crate::store::Database;

use super::archives::{Reach, WorkerArchives};
use super::bindings::{self, text};
use super::container::ContainerTransport;
use super::instances::InstanceWaker;
use super::platform::{FetchTransport, WebCryptoSigner, R2};

/// Worker secrets by name.
pub struct EnvSecrets {
    pub env: Env,
}

impl SecretSource for EnvSecrets {
    fn secret(&self, name: &str) -> Option<Secret> {
        // Config validation refuses these already; never hand them out.
        if !crate::runs::environment::deploy_may_read(name) {
            return None;
        }
        bindings::secret(&self.env, name)
    }
}

/// The owned pieces a run's services borrow from, built per pass from the
/// Worker's bindings.
pub struct RunEnvParts {
    transport: FetchTransport,
    signer: WebCryptoSigner,
    blobs: Option<R2>,
    api_url: String,
    app_id: Option<String>,
    key_der: std::result::Result<Secret<Vec<u8>>, String>,
    sandbox_url: String,
    sandbox_token: Option<Secret>,
    /// Cloudflare Containers (one per sandbox id), when SANDBOX_BACKEND is
    /// "container"; else the agent at `sandbox_url`.
    container: Option<ContainerTransport>,
    public_url: String,
    waker: InstanceWaker,
    secrets: EnvSecrets,
    notify: Option<NotifyTarget>,
    pool_capacity: u32,
    checks_capacity: u32,
    checks_per_repo: u32,
    environments: Environments,
    git_url: String,
    log_link_secret: Option<Secret>,
    cache_bytes_per_repo: u64,
}

/// The services runs use, from the Worker's bindings.
pub fn run_env_parts(env: &Env) -> RunEnvParts {
    let key_der = app_key_der(env);
    let number = |name| text(env, name).and_then(|v| v.parse::<u32>().ok());
    let container = text(env, bindings::SANDBOX_BACKEND)
        .filter(|b| b == "container")
        .map(|_| ContainerTransport { env: env.clone() });
    // With containers, no more than wrangler.toml's max_instances may run.
    let capacity_max = match container {
        Some(_) => CONTAINER_INSTANCES_MAX,
        None => POOL_CAPACITY_MAX,
    };
    let pool_capacity = number(bindings::POOL_CAPACITY)
        .unwrap_or(bindings::POOL_CAPACITY_DEFAULT)
        .clamp(1, capacity_max);
    let (checks_capacity, checks_per_repo) = check_capacities(
        pool_capacity,
        number(bindings::CHECKS_CAPACITY),
        number(bindings::CHECKS_PER_REPO),
    );
    RunEnvParts {
        transport: FetchTransport,
        signer: WebCryptoSigner,
        blobs: env.bucket(bindings::LOGS).ok().map(R2),
        api_url: text(env, bindings::GITHUB_API_URL)
            .unwrap_or_else(|| bindings::GITHUB_API_URL_DEFAULT.to_owned()),
        app_id: text(env, bindings::GITHUB_APP_ID),
        key_der,
        sandbox_url: text(env, bindings::SANDBOX_URL)
            .unwrap_or_else(|| bindings::SANDBOX_URL_DEFAULT.to_owned()),
        sandbox_token: bindings::secret(env, bindings::SANDBOX_AGENT_TOKEN),
        container,
        public_url: text(env, bindings::PUBLIC_URL).unwrap_or_default(),
        waker: InstanceWaker { env: env.clone() },
        secrets: EnvSecrets { env: env.clone() },
        notify: text(env, bindings::NOTIFY_URL).map(|url| NotifyTarget {
            url,
            secret: bindings::secret(env, bindings::NOTIFY_SECRET),
        }),
        pool_capacity,
        checks_capacity,
        checks_per_repo,
        environments: Environments::parse(text(env, bindings::ENVIRONMENTS).as_deref()),
        git_url: text(env, bindings::GITHUB_GIT_URL)
            .unwrap_or_else(|| crate::github::GIT_URL_DEFAULT.to_owned()),
        log_link_secret: bindings::secret(env, bindings::LOG_LINK_SECRET),
        cache_bytes_per_repo: text(env, bindings::CACHE_BYTES_PER_REPO)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(crate::limits::CACHE_BYTES_PER_REPO_DEFAULT),
    }
}

/// The App's key as PKCS#8 DER, decoded once per isolate (every pass
/// composes a run environment; the key, like every binding, cannot change
/// under an isolate: `bindings::text`).
fn app_key_der(env: &Env) -> std::result::Result<Secret<Vec<u8>>, String> {
    type Decoded = std::result::Result<Secret<Vec<u8>>, String>;
    thread_local! {
        static DECODED: std::cell::OnceCell<Decoded> = const { std::cell::OnceCell::new() };
    }
    DECODED.with(|d| {
        d.get_or_init(|| match text(env, bindings::GITHUB_APP_PRIVATE_KEY) {
            None => Err("GITHUB_APP_PRIVATE_KEY is not set".to_owned()),
            Some(pem) => private_key_pkcs8_der(&pem)
                .map(Secret::new)
                .map_err(|e| e.to_string()),
        })
        .clone()
    })
}

/// Stands in for a missing R2 binding: every upload fails with a clear
/// message (a step error), rather than the Worker refusing to start.
struct NoBlobs;

#[async_trait::async_trait(?Send)]
impl crate::blobs::Blobs for NoBlobs {
    async fn put_text(&self, _: &str, _: &str) -> std::result::Result<(), String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
    async fn get_text(&self, _: &str) -> std::result::Result<Option<String>, String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
    async fn list(&self, _: &str, _: u32) -> std::result::Result<Vec<String>, String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
    async fn delete(&self, _: &str) -> std::result::Result<(), String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
}

static NO_BLOBS: NoBlobs = NoBlobs;

impl RunEnvParts {
    pub fn blobs(&self) -> Option<&dyn crate::blobs::Blobs> {
        self.blobs.as_ref().map(|b| b as &dyn crate::blobs::Blobs)
    }

    /// R2, or without its binding a store that refuses every call.
    pub fn blobs_or_refusal(&self) -> &dyn crate::blobs::Blobs {
        match &self.blobs {
            Some(b) => b,
            None => &NO_BLOBS,
        }
    }

    pub fn sandbox(&self) -> AgentSandbox<'_> {
        match &self.container {
            Some(c) => AgentSandbox {
                transport: c,
                base_url: "http://sandbox".into(),
                token: self.sandbox_token.clone(),
            },
            None => AgentSandbox {
                transport: &self.transport,
                base_url: self.sandbox_url.clone(),
                token: self.sandbox_token.clone(),
            },
        }
    }

    /// A job's artifacts between its sandbox and R2.
    pub fn archives(&self) -> WorkerArchives {
        WorkerArchives {
            reach: match &self.container {
                Some(c) => Reach::Containers(c.env.clone()),
                None => Reach::Url(self.sandbox_url.clone()),
            },
            token: self.sandbox_token.clone(),
            bucket: self.blobs.as_ref().map(|b| b.0.clone()),
        }
    }

    /// The GitHub client, authenticated as the App.
    /// The operator's deploy environments (`ENVIRONMENTS`).
    pub fn environments(&self) -> &Environments {
        &self.environments
    }

    pub fn github<'a>(&'a self, clock: &'a dyn Clock) -> GitHub<'a> {
        GitHub {
            transport: &self.transport,
            signer: &self.signer,
            clock,
            api_url: self.api_url.clone(),
            app_id: self.app_id.clone(),
            key_der: self.key_der.clone(),
        }
    }

    /// The runs over these services; with a meter, each instance's use of
    /// the billed ones is counted (`runs::metered`).
    pub fn registry<'a>(
        &'a self,
        clock: &'a dyn Clock,
        db: &'a dyn Database,
        meter: Option<&'a Meter>,
    ) -> RegistryOwner<'a> {
        RegistryOwner {
            parts: self,
            sandbox: self.sandbox(),
            archives: self.archives(),
            clock,
            db,
            meter,
        }
    }
}

/// Owns the sandbox clients the registry borrows.
pub struct RegistryOwner<'a> {
    parts: &'a RunEnvParts,
    sandbox: AgentSandbox<'a>,
    archives: WorkerArchives,
    clock: &'a dyn Clock,
    db: &'a dyn Database,
    meter: Option<&'a Meter>,
}

impl RegistryOwner<'_> {
    fn registry(&self) -> Registry<'_> {
        let p = self.parts;
        Registry {
            runs: &crate::runs::registry::RUNS,
            env: RunEnv {
                clock: self.clock,
                http: &p.transport,
                github: p.github(self.clock),
                sandbox: &self.sandbox,
                archives: &self.archives,
                blobs: match &p.blobs {
                    Some(b) => b,
                    None => &NO_BLOBS,
                },
                db: self.db,
                waker: &p.waker,
                terminator: &p.waker,
                spawner: &p.waker,
                secrets: &p.secrets,
                environments: &p.environments,
                git_url: p.git_url.clone(),
                notify: p.notify.clone(),
                pool_capacity: p.pool_capacity,
                checks_capacity: p.checks_capacity,
                checks_per_repo: p.checks_per_repo,
                public_url: p.public_url.clone(),
                log_link_secret: p.log_link_secret.clone(),
                cache_bytes_per_repo: p.cache_bytes_per_repo,
            },
            meter: self.meter,
        }
    }
}

#[async_trait::async_trait(?Send)]
impl crate::engine::RunRegistry for RegistryOwner<'_> {
    async fn execute(
        &self,
        run: &str,
        ctx: &crate::engine::Ctx<'_>,
        input: &Value,
    ) -> std::result::Result<crate::engine::RunOutcome, crate::engine::RunError> {
        self.registry().execute(run, ctx, input).await
    }

    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: crate::engine::Status,
    ) -> std::result::Result<(), String> {
        self.registry()
            .finalize(run, instance_id, input, status)
            .await
    }

    async fn prepare_restart(
        &self,
        run: &str,
        req: &crate::engine::RestartRequest<'_>,
    ) -> std::result::Result<u32, String> {
        self.registry().prepare_restart(run, req).await
    }
}
