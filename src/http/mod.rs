//! The HTTP surface: routing, request parsing, auth and JSON errors.
//! Pure parts live here and are tested natively; `crate::worker_glue`
//! carries them out against the Worker's bindings.

pub mod access;
pub mod ack_first;
pub mod auth;
pub mod body;
pub mod dashboard;
pub mod dispatch;
pub mod error;
pub mod jwt;
pub mod lists;
pub mod oidc;
pub mod pages;
pub mod routes;
pub mod setup;
pub mod webhook;

use hmac::Mac;

pub use error::ApiError;

/// Checks `Authorization: Bearer <ADMIN_TOKEN>` in constant time.
pub fn check_admin(header: Option<&str>, admin_token: Option<&str>) -> Result<(), ApiError> {
    let expected = admin_token.filter(|t| !t.is_empty()).ok_or_else(|| {
        ApiError::new(
            503,
            "not_configured",
            "ADMIN_TOKEN is not set; the API is disabled",
        )
    })?;
    let given = header
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                401,
                "unauthorized",
                "Authorization: Bearer <ADMIN_TOKEN> is required",
            )
        })?;
    // Compare HMACs of both under a fixed key: constant time whatever the
    // lengths.
    let tag = |s: &str| {
        let mut mac =
            <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(b"sluice-admin-compare").ok()?;
        mac.update(s.as_bytes());
        Some(mac.finalize())
    };
    match (tag(given), tag(expected)) {
        (Some(a), Some(b)) if a == b => Ok(()),
        _ => Err(ApiError::new(401, "unauthorized", "bad admin token")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_auth() {
        assert_eq!(check_admin(Some("Bearer t0k"), Some("t0k")), Ok(()));
        assert_eq!(
            check_admin(Some("Bearer nope"), Some("t0k"))
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(check_admin(None, Some("t0k")).unwrap_err().status, 401);
        assert_eq!(
            check_admin(Some("t0k"), Some("t0k")).unwrap_err().status,
            401
        );
        assert_eq!(check_admin(Some("Bearer x"), None).unwrap_err().status, 503);
    }
}
