//! The headers every `/v1/` request meets before its handler:
//! `sluice::http::check_admin` (`Authorization: Bearer <ADMIN_TOKEN>`) and
//! the Content-Length check `sluice::http::webhook::check_declared_length`.
//!
//! Input: line 1 the configured `ADMIN_TOKEN` (`<none>`: unset), the rest
//! the `Authorization` header (`<none>`: absent), also tried as a
//! Content-Length.
//!
//! Asserts, besides "no panic":
//! - the API answers 503 exactly when no token is set, lets a request in
//!   exactly when the header is `Bearer ` and the token, and says 401
//!   otherwise; the token never shapes a refusal's message;
//! - a Content-Length is refused exactly when it is a number over the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::http::check_admin;
use sluice::http::webhook::check_declared_length;
use sluice::limits::WEBHOOK_BODY_BYTES_MAX;
use sluice_fuzz::line;

/// The value that stands for "absent" on either line.
const ABSENT: &str = "<none>";

fuzz_target!(|data: &[u8]| {
    let (token_raw, header_raw) = line(data);
    let token = String::from_utf8_lossy(token_raw);
    let header = String::from_utf8_lossy(header_raw);
    let token = (token != ABSENT).then_some(token.as_ref());
    let header = (header != ABSENT).then_some(header.as_ref());

    let answer = check_admin(header, token);
    let configured = token.filter(|t| !t.is_empty());
    match (configured, &answer) {
        (None, r) => assert_eq!(r.as_ref().map_err(|e| e.status), Err(503)),
        (Some(t), Ok(())) => {
            assert_eq!(header, Some(format!("Bearer {t}").as_str()), "let in");
        }
        (Some(t), Err(e)) => {
            assert_eq!(e.status, 401);
            assert_ne!(header, Some(format!("Bearer {t}").as_str()), "kept out");
            // The token never shapes the answer: another token refuses the
            // same header with the same words. (Searching the message for
            // the token would flag tokens that are words of the message.)
            let other = format!("other-{t}");
            if let Err(o) = check_admin(header, Some(&other)) {
                assert_eq!((o.status, &o.message), (e.status, &e.message));
            }
        }
    }

    let n = header.and_then(|v| v.trim().parse::<u64>().ok());
    assert_eq!(
        check_declared_length(header).is_err(),
        n.is_some_and(|n| n > WEBHOOK_BODY_BYTES_MAX as u64)
    );
});
