//! RS256 tokens for native tests: the test-only keys under
//! `tests/fixtures` sign them, `ring` verifies them as WebCrypto does in the
//! Worker, and a strict fake serves one issuer's JWKS at one URL.

use std::cell::RefCell;

use async_trait::async_trait;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::{json, Value};
use sluice::http::jwt::{Jwk, JwksFetch, Rs256Verify};

/// A test-only key pair (never used anywhere but the tests).
pub struct Key {
    pub kid: &'static str,
    pair: RsaKeyPair,
}

fn load_key(file: &str, kid: &'static str) -> Key {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let pem = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let b64: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let der = STANDARD.decode(b64).expect("PEM body");
    let pair = RsaKeyPair::from_pkcs8(&der).expect("PKCS#8 RSA key");
    Key { kid, pair }
}

pub fn key_a() -> Key {
    load_key("access-test-only-key-a.pem", "kid-a")
}

pub fn key_b() -> Key {
    load_key("access-test-only-key-b.pem", "kid-b")
}

impl Key {
    /// The same key under another key id (an impostor naming a real one).
    pub fn named(self, kid: &'static str) -> Key {
        Key { kid, ..self }
    }

    pub fn jwk(&self) -> Value {
        let c: RsaPublicKeyComponents<Vec<u8>> = self.pair.public_key().into();
        json!({
            "kid": self.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
            "n": URL_SAFE_NO_PAD.encode(&c.n), "e": URL_SAFE_NO_PAD.encode(&c.e),
        })
    }

    /// A compact JWS of `claims`, signed RS256 with this key.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "RS256", "kid": self.kid, "typ": "JWT"});
        let input = format!("{}.{}", b64(&header), b64(claims));
        let mut sig = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                input.as_bytes(),
                &mut sig,
            )
            .expect("sign");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

pub fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

/// The JWKS document of `keys`.
pub fn jwks(keys: &[&Key]) -> Vec<u8> {
    let keys: Vec<Value> = keys.iter().map(|k| k.jwk()).collect();
    json!({ "keys": keys }).to_string().into_bytes()
}

/// A strict fake: serves `body` at `url` alone and records every fetch.
pub struct FakeKeys {
    pub url: String,
    body: Vec<u8>,
    pub fetched: RefCell<Vec<String>>,
}

impl FakeKeys {
    pub fn serving(url: &str, keys: &[&Key]) -> FakeKeys {
        FakeKeys {
            url: url.to_owned(),
            body: jwks(keys),
            fetched: RefCell::new(Vec::new()),
        }
    }
}

#[async_trait(?Send)]
impl JwksFetch for FakeKeys {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        self.fetched.borrow_mut().push(url.to_owned());
        assert_eq!(
            url, self.url,
            "fetched keys from a URL that is not the issuer's"
        );
        Ok(self.body.clone())
    }
}

/// RS256 with ring, as WebCrypto does it in the Worker.
pub struct RingVerify;

#[async_trait(?Send)]
impl Rs256Verify for RingVerify {
    async fn verify(&self, jwk: &Jwk, input: &[u8], sig: &[u8]) -> Result<bool, String> {
        let n = jwk.modulus().map_err(|e| e.to_string())?;
        let e = jwk.exponent().map_err(|e| e.to_string())?;
        let key = RsaPublicKeyComponents { n, e };
        Ok(key
            .verify(&signature::RSA_PKCS1_2048_8192_SHA256, input, sig)
            .is_ok())
    }
}
