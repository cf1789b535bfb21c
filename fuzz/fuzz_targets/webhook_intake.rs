//! `POST /webhooks/github` as the Worker sees it: headers, the raw body and
//! the configured secret, through `sluice::http::webhook::intake` (and the
//! Content-Length check before the body is read).
//!
//! Input: header lines, a blank line, the body (see `sluice_fuzz::HttpInput`);
//! `X-Hub-Signature-256: sign` stands for the body's right signature.
//!
//! Asserts, besides "no panic":
//! - nothing is accepted unless its signature is the body's HMAC under the
//!   secret (only hex case and surrounding whitespace may differ);
//! - what is accepted had every header intake requires;
//! - bad input is a 4xx (or 503 without a secret), never a 5xx that would
//!   page an operator, and the secret never shapes an error message;
//! - a correctly signed body under a set secret is never refused as unsigned;
//! - intake is `github::webhook::parse` then `runs::triggers::plan`, and is
//!   deterministic (a redelivery names the same instances);
//! - every planned instance passes `check_planned_create`;
//! - nothing older than `NOT_BEFORE_MS` by its own timestamp is accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::github::webhook::{parse, sign};
use sluice::http::webhook::{check_declared_length, intake, Delivery, Intake, Planned, WebhookHeaders};
use sluice::limits::WEBHOOK_BODY_BYTES_MAX;
use sluice::runs::triggers::{plan, Plan};
use sluice_fuzz::{check_planned_create, intake_config, plan_context, HttpInput, SIGN_PLACEHOLDER};

/// The oldest event intake acts on (2023-11-14T22:13:20Z): seeds carry
/// recent timestamps, and mutated ones land on both sides.
const NOT_BEFORE_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let input = HttpInput::parse(data);
    let secret = input.secret.as_deref();
    let body = input.body.as_slice();

    let declared = check_declared_length(input.content_length.as_deref());
    let declared_n = input
        .content_length
        .as_deref()
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert_eq!(
        declared.is_err(),
        declared_n.is_some_and(|n| n > WEBHOOK_BODY_BYTES_MAX as u64),
        "Content-Length {:?}",
        input.content_length
    );

    let auto_signed = input.signature.as_deref() == Some(SIGN_PLACEHOLDER);
    let signature = if auto_signed {
        Some(sign(secret.unwrap_or("").as_bytes(), body))
    } else {
        input.signature.clone()
    };
    let headers = WebhookHeaders {
        event: input.event.as_deref(),
        delivery: input.delivery.as_deref(),
        signature: signature.as_deref(),
        content_type: input.content_type.as_deref(),
        content_length: input.content_length.as_deref(),
    };
    let cfg = intake_config(secret, NOT_BEFORE_MS);
    let result = intake(&headers, body, &cfg);
    assert_eq!(
        intake(&headers, body, &cfg),
        result,
        "intake is deterministic"
    );

    match &result {
        Err(e) => {
            assert!(
                matches!(e.status, 400 | 401 | 413 | 415 | 422 | 503),
                "bad input answered {} {}",
                e.status,
                e.code
            );
            assert!(!e.is_server_error() || e.status == 503);
            if e.status == 503 {
                assert!(
                    secret.is_none_or(str::is_empty),
                    "503 only without a secret"
                );
            }
            // The secret never shapes an error message: under another
            // secret (re-signed alike), the same refusal says the same
            // thing. (A literal search for the secret in the message would
            // also flag secrets that happen to be words of the message.)
            if let Some(s) = secret.filter(|s| !s.is_empty()) {
                let other = format!("other-{s}");
                let other_signature = if auto_signed {
                    Some(sign(other.as_bytes(), body))
                } else {
                    signature.clone()
                };
                let other_headers = WebhookHeaders {
                    signature: other_signature.as_deref(),
                    ..headers.clone()
                };
                if let Err(o) = intake(&other_headers, body, &intake_config(Some(&other), NOT_BEFORE_MS)) {
                    if (o.status, o.code) == (e.status, e.code) {
                        assert_eq!(o.message, e.message, "the secret shapes the message");
                    }
                }
            }
            if auto_signed && secret.is_some_and(|s| !s.is_empty()) {
                assert_ne!(e.status, 401, "a correctly signed body was refused: {e:?}");
            }
        }
        Ok(accepted) => {
            let secret = secret.expect("accepted without a secret");
            assert!(!secret.is_empty(), "accepted under an empty secret");
            let given = signature.as_deref().expect("accepted without a signature");
            let hex_given = given
                .strip_prefix("sha256=")
                .expect("accepted a signature without sha256=")
                .trim()
                .to_ascii_lowercase();
            let expected = sign(secret.as_bytes(), body);
            assert_eq!(
                Some(hex_given.as_str()),
                expected.strip_prefix("sha256="),
                "accepted a body whose signature is not its HMAC"
            );
            let event = input.event.as_deref().expect("accepted without an event");
            assert!(!event.is_empty());
            let d = input
                .delivery
                .as_deref()
                .expect("accepted without a delivery id");
            assert!(!d.is_empty() && d.len() <= 100, "delivery id {d:?}");
            let media = input.content_type.as_deref().unwrap_or("");
            let media = media.split(';').next().unwrap_or("").trim();
            assert!(media.eq_ignore_ascii_case("application/json"), "{media:?}");
            assert!(body.len() <= WEBHOOK_BODY_BYTES_MAX);

            let parsed = parse(event, body).expect("accepted a body parse refuses");
            assert!(
                parsed.occurred_ms().is_none_or(|at| at >= NOT_BEFORE_MS),
                "accepted an event older than the retention"
            );
            match (accepted, plan(&parsed, &plan_context())) {
                (Intake::Ignored { event: e, reason }, Plan::Ignore(r)) => {
                    assert_eq!(e, event);
                    assert_eq!(reason, &r);
                }
                (
                    Intake::Act(Delivery {
                        delivery,
                        event: e,
                        repo,
                        planned: Planned::Create(creates),
                        ..
                    }),
                    Plan::Create(planned),
                ) => {
                    assert_eq!(delivery, d);
                    assert_eq!(e, event);
                    assert_eq!(creates, &planned);
                    assert!(!creates.is_empty(), "an act with nothing to create");
                    for c in creates {
                        check_planned_create(c);
                        assert_eq!(&c.repo, repo);
                    }
                }
                (Intake::Act(Delivery { planned: Planned::Send(sends), .. }), Plan::Send(planned)) => {
                    assert_eq!(sends, &planned, "a pressed button is sent as planned");
                }
                (Intake::Act(Delivery { planned: Planned::Route(routes), .. }), Plan::Route(planned)) => {
                    assert_eq!(routes, &planned, "a decision is routed as planned");
                }
                (Intake::Act(Delivery { planned: Planned::Rerun(reruns), .. }), Plan::Rerun(planned)) => {
                    assert_eq!(reruns, &planned, "re-runs are resolved as planned");
                }
                (a, p) => panic!("intake {a:?} disagrees with the plan {p:?}"),
            }
        }
    }
});
