//! `.sluice.toml`, written by whoever can push a commit:
//! `sluice::runs::config::parse`, then what the runs compute from a valid
//! config (`command_timeout_ms`, the deploy group and queue policy).
//!
//! Input: the file's bytes. The Worker refuses a file that is not UTF-8
//! before parsing (`github::client::file_at`), so only UTF-8 reaches `parse`.
//!
//! Asserts, besides "no panic":
//! - the result survives the JSON trip of its journal entry unchanged;
//! - `Valid` means every rule of `validate` holds: non-empty commands and
//!   branch, timeouts the runs accept, secret names of `[A-Za-z0-9_]` that a
//!   deploy may read, queue durations that parse;
//! - a valid config written back out as TOML parses to itself;
//! - a file over `CONFIG_BYTES_MAX` is never valid.
//!
//! Not asserted: that the queue policy of a valid config is accepted. It
//! is not today (`confirmation_timeout = "72h"`, README's own example, is
//! valid here and refused by `QueuePolicy::from_config`, whose bound is
//! 24 h): see docs/fuzzing.md. The target still runs it for panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::limits::{COMMAND_TIMEOUT_MS_MAX, CONFIG_BYTES_MAX};
use sluice::runs::config::{
    command_timeout_ms, parse, parse_duration_ms, ConfigState,
};
use sluice::runs::deploy::{group_key, policy_of};
use sluice::runs::inputs::DeployInput;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let state = parse(text);

    let journaled = serde_json::to_string(&state).expect("a config state serializes");
    let back: ConfigState = serde_json::from_str(&journaled).expect("and reads back");
    assert_eq!(back, state, "the journal trip changed the config");

    let config = match state {
        ConfigState::Missing => panic!("parse never says Missing"),
        ConfigState::Invalid { message } => {
            assert!(!message.is_empty(), "an invalid config says why");
            return;
        }
        ConfigState::Valid { config } => config,
    };
    assert!(text.len() <= CONFIG_BYTES_MAX);
    let timeout_ok = |t: Option<&str>| {
        let ms = command_timeout_ms(t).expect("a valid config's timeout is accepted");
        assert!((1..=COMMAND_TIMEOUT_MS_MAX).contains(&ms));
    };
    if let Some(check) = &config.check {
        assert!(!check.command.trim().is_empty());
        timeout_ok(check.timeout.as_deref());
    }
    if let Some(deploy) = &config.deploy {
        assert!(!deploy.command.trim().is_empty());
        assert!(!deploy.branch.trim().is_empty());
        timeout_ok(deploy.timeout.as_deref());
        // Secrets are the operator's (environments): a valid config names none.
        assert!(deploy.secrets.is_none(), "a valid config names secrets");
        if let Some(e) = &deploy.environment {
            assert!(sluice::runs::environment::is_name(e), "{e:?}");
        }
        if let Some(q) = &deploy.queue {
            for v in [
                &q.queued_timeout,
                &q.supersede_after,
                &q.confirmation_timeout,
            ]
            .into_iter()
            .flatten()
            {
                assert!(parse_duration_ms(v).is_ok(), "{v:?}");
            }
        }
        if let Err(m) = policy_of(deploy) {
            assert!(
                m.contains("[deploy.queue]"),
                "a policy error names its table: {m}"
            );
        }
        let input = DeployInput {
            repo: "octo/hello".into(),
            branch: deploy.branch.clone(),
            sha: "0123456789abcdef0123456789abcdef01234567".into(),
            installation_id: 1,
            default_branch: "main".into(),
            sender: "ana".into(),
            imperative: false,
            inputs: Default::default(),
            dispatch: None,
            needs_check: None,
        };
        let group = group_key(&input, deploy);
        assert!(group.starts_with("deploy:octo/hello:"));
    }

    // Written back out, the config is the same config (when the printout
    // still fits the size limit: escapes can make it longer).
    let printed = toml::to_string(&config).expect("a valid config prints as TOML");
    if printed.len() <= CONFIG_BYTES_MAX {
        assert_eq!(
            parse(&printed),
            ConfigState::Valid { config },
            "re-read from:\n{printed}"
        );
    }
});
