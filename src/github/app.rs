//! The GitHub App's identity: its private key and the RS256 JWT it signs
//! to ask for installation tokens. Signing itself is behind `Rs256Signer`
//! (WebCrypto in the Worker), so no RSA code is compiled in.

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use pkcs1::der::{Decode, Encode};
use serde::Serialize;

use crate::limits::{APP_JWT_BACKDATE_S, APP_JWT_TTL_S};

#[async_trait(?Send)]
pub trait Rs256Signer {
    /// RSASSA-PKCS1-v1_5 with SHA-256 of `data` under a PKCS#8 DER key.
    async fn sign(&self, pkcs8_der: &[u8], data: &[u8]) -> Result<Vec<u8>, String>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GITHUB_APP_PRIVATE_KEY: {}", self.0)
    }
}

/// Reads the App's private key, PKCS#1 (`BEGIN RSA PRIVATE KEY`, what
/// GitHub hands out) or PKCS#8 (`BEGIN PRIVATE KEY`), and returns PKCS#8
/// DER, which WebCrypto imports. Literal `\n` sequences (a key pasted into
/// a one-line secret) are accepted.
pub fn private_key_pkcs8_der(pem: &str) -> Result<Vec<u8>, KeyError> {
    let pem = pem.trim().replace("\\n", "\n").replace("\r\n", "\n");
    let (label, der) = pkcs1::der::pem::decode_vec(pem.as_bytes())
        .map_err(|e| KeyError(format!("not a PEM key ({e})")))?;
    match label {
        "RSA PRIVATE KEY" => {
            pkcs1::RsaPrivateKey::from_der(&der)
                .map_err(|e| KeyError(format!("bad PKCS#1 key ({e})")))?;
            pkcs8::PrivateKeyInfo::new(pkcs1::ALGORITHM_ID, &der)
                .to_der()
                .map_err(|e| KeyError(format!("cannot wrap key ({e})")))
        }
        "PRIVATE KEY" => {
            let info = pkcs8::PrivateKeyInfo::from_der(&der)
                .map_err(|e| KeyError(format!("bad PKCS#8 key ({e})")))?;
            if info.algorithm.oid != pkcs1::ALGORITHM_OID {
                return Err(KeyError("the key is not an RSA key".into()));
            }
            Ok(der)
        }
        other => Err(KeyError(format!("unexpected PEM label {other:?}"))),
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iat: i64,
    exp: i64,
    iss: &'a str,
}

/// The unsigned part of the App JWT: `base64url(header).base64url(claims)`.
/// `iat` is back-dated and `exp` kept under GitHub's 10-minute cap.
pub fn jwt_signing_input(app_id: &str, now_s: i64) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = Claims {
        iat: now_s - APP_JWT_BACKDATE_S,
        exp: now_s + APP_JWT_TTL_S,
        iss: app_id,
    };
    // Serializing two integers and a string cannot fail.
    let claims = serde_json::to_vec(&claims).unwrap_or_default();
    format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims))
}

/// Signs the App JWT.
pub async fn app_jwt(
    signer: &dyn Rs256Signer,
    key_der: &[u8],
    app_id: &str,
    now_s: i64,
) -> Result<String, String> {
    let input = jwt_signing_input(app_id, now_s);
    let sig = signer.sign(key_der, input.as_bytes()).await?;
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwt_claims_fit_githubs_rules() {
        let input = jwt_signing_input("123", 1_000_000);
        let (_, claims) = input.split_once('.').unwrap();
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["iss"], "123");
        assert_eq!(claims["iat"], 1_000_000 - 60);
        let span = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        assert!(
            span <= 600,
            "GitHub refuses exp more than 10 minutes after iat"
        );
    }

    #[test]
    fn garbage_keys_are_refused_without_panicking() {
        for bad in [
            "",
            "hello",
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----",
        ] {
            assert!(private_key_pkcs8_der(bad).is_err(), "{bad:?}");
        }
    }
}
