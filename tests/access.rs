//! Cloudflare Access JWT verification with real RS256 tokens: signed in the
//! test with the test-only keys under tests/fixtures, verified through
//! `Rs256Verify` implemented with `ring` (standing in for WebCrypto), keys
//! served by a strict fake `JwksFetch` that records every fetch.

use std::cell::RefCell;

use async_trait::async_trait;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use futures::executor::block_on;
use hmac::Mac;
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::{json, Value};
use sluice::http::access::{
    self, parse_jwks, verify, AccessConfig, AccessError, AccessIdentity, Jwk, JwksCache, JwksFetch,
    Rs256Verify, CLOCK_LEEWAY_S, JWKS_REFETCH_MIN_INTERVAL_S, JWKS_STALE_MAX_S, JWKS_TTL_S,
    TOKEN_CHARS_MAX,
};
use sluice::http::ApiError;

const TEAM: &str = "acme";
const ISSUER: &str = "https://acme.cloudflareaccess.com";
const CERTS: &str = "https://acme.cloudflareaccess.com/cdn-cgi/access/certs";
const AUD: &str = "4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2";
const NOW_S: i64 = 1_760_000_000;

/// A test-only key pair (never used anywhere but these tests).
struct Key {
    kid: &'static str,
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

fn key_a() -> Key {
    load_key("access-test-only-key-a.pem", "kid-a")
}

fn key_b() -> Key {
    load_key("access-test-only-key-b.pem", "kid-b")
}

impl Key {
    fn jwk(&self) -> Value {
        let c: RsaPublicKeyComponents<Vec<u8>> = self.pair.public_key().into();
        json!({
            "kid": self.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
            "n": URL_SAFE_NO_PAD.encode(&c.n), "e": URL_SAFE_NO_PAD.encode(&c.e),
        })
    }

    /// A compact JWS of `claims` under `header`, signed RS256 with this key.
    fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", b64(header), b64(claims));
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

    fn sign(&self, claims: &Value) -> String {
        self.sign_with_header(
            &json!({"alg": "RS256", "kid": self.kid, "typ": "JWT"}),
            claims,
        )
    }
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

/// The claims Access issues for a person, valid at `NOW_S`.
fn claims() -> Value {
    json!({
        "aud": [AUD],
        "email": "ana@example.com",
        "exp": NOW_S + 3_600,
        "iat": NOW_S - 60,
        "nbf": NOW_S - 60,
        "iss": ISSUER,
        "type": "app",
        "identity_nonce": "6ei69kawdKzMIAPF",
        "sub": "7335d417-61da-459d-899c-0a01c76a2f94",
        "country": "PT"
    })
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn without(mut base: Value, key: &str) -> Value {
    if let Some(o) = base.as_object_mut() {
        o.remove(key);
    }
    base
}

/// The certs document as Access publishes it (JWKs plus PEM certs).
fn certs(keys: &[&Key]) -> Vec<u8> {
    let jwks: Vec<Value> = keys.iter().map(|k| k.jwk()).collect();
    json!({
        "keys": jwks,
        "public_cert": {"kid": "kid-a", "cert": "-----BEGIN CERTIFICATE-----\n..."},
        "public_certs": [{"kid": "kid-a", "cert": "-----BEGIN CERTIFICATE-----\n..."}]
    })
    .to_string()
    .into_bytes()
}

/// A strict fake: answers only the team's certs URL, counts fetches, and
/// serves what the test set (or fails when told to).
struct FakeCerts {
    body: RefCell<Result<Vec<u8>, String>>,
    fetched: RefCell<Vec<String>>,
}

impl FakeCerts {
    fn serving(keys: &[&Key]) -> FakeCerts {
        FakeCerts {
            body: RefCell::new(Ok(certs(keys))),
            fetched: RefCell::new(Vec::new()),
        }
    }
    fn serve(&self, body: Result<Vec<u8>, String>) {
        *self.body.borrow_mut() = body;
    }
    fn count(&self) -> usize {
        self.fetched.borrow().len()
    }
}

#[async_trait(?Send)]
impl JwksFetch for FakeCerts {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        self.fetched.borrow_mut().push(url.to_owned());
        assert_eq!(url, CERTS, "fetched a URL that is not the team's certs");
        self.body.borrow().clone()
    }
}

/// RS256 with ring, as WebCrypto does it in the Worker. Counts calls.
#[derive(Default)]
struct RingVerify {
    calls: RefCell<u32>,
}

#[async_trait(?Send)]
impl Rs256Verify for RingVerify {
    async fn verify(&self, jwk: &Jwk, input: &[u8], sig: &[u8]) -> Result<bool, String> {
        *self.calls.borrow_mut() += 1;
        let n = jwk.modulus().map_err(|e| e.to_string())?;
        let e = jwk.exponent().map_err(|e| e.to_string())?;
        let key = RsaPublicKeyComponents { n, e };
        Ok(key
            .verify(&signature::RSA_PKCS1_2048_8192_SHA256, input, sig)
            .is_ok())
    }
}

struct World {
    cfg: AccessConfig,
    cache: JwksCache,
    certs: FakeCerts,
    verifier: RingVerify,
}

impl World {
    fn new(serving: &[&Key]) -> World {
        World {
            cfg: AccessConfig::new(TEAM, AUD).expect("config"),
            cache: JwksCache::new(),
            certs: FakeCerts::serving(serving),
            verifier: RingVerify::default(),
        }
    }

    fn check_at(&self, token: &str, now_s: i64) -> Result<AccessIdentity, AccessError> {
        block_on(verify(
            Some(token),
            &self.cfg,
            &self.cache,
            &self.certs,
            &self.verifier,
            now_s,
        ))
    }

    fn check(&self, token: &str) -> Result<AccessIdentity, AccessError> {
        self.check_at(token, NOW_S)
    }
}

#[test]
fn a_valid_token_passes_and_its_keys_are_cached() {
    let a = key_a();
    let w = World::new(&[&a]);
    let who = w.check(&a.sign(&claims())).expect("valid token");
    assert_eq!(who.email.as_deref(), Some("ana@example.com"));
    assert_eq!(
        who.sub.as_deref(),
        Some("7335d417-61da-459d-899c-0a01c76a2f94")
    );
    assert_eq!(who.exp_s, NOW_S + 3_600);
    assert_eq!(w.certs.count(), 1);
    // A second request within the TTL is answered from the cache.
    w.check_at(&a.sign(&claims()), NOW_S + 10).expect("again");
    assert_eq!(w.certs.count(), 1);
    assert_eq!(w.cache.len(), 1);
}

#[test]
fn a_service_token_passes_with_its_common_name() {
    let a = key_a();
    let w = World::new(&[&a]);
    let service = json!({
        "aud": [AUD], "exp": NOW_S + 60, "iat": NOW_S, "iss": ISSUER,
        "common_name": "88bf3b6d86161464f6509f7219099e57.access", "sub": "", "type": "app"
    });
    let who = w.check(&a.sign(&service)).expect("service token");
    assert_eq!(who.email, None);
    assert_eq!(who.sub, None);
    assert_eq!(
        who.common_name.as_deref(),
        Some("88bf3b6d86161464f6509f7219099e57.access")
    );
}

#[test]
fn the_audience_must_include_the_application() {
    let a = key_a();
    let w = World::new(&[&a]);
    let other = with(claims(), "aud", json!(["someone-else"]));
    assert_eq!(w.check(&a.sign(&other)), Err(AccessError::WrongAudience));
    let several = with(claims(), "aud", json!(["someone-else", AUD]));
    assert!(w.check(&a.sign(&several)).is_ok());
    let single = with(claims(), "aud", json!(AUD));
    assert!(w.check(&a.sign(&single)).is_ok());
    for bad in [json!([]), json!(null), json!(7), json!([[AUD]])] {
        let c = with(claims(), "aud", bad);
        assert_eq!(w.check(&a.sign(&c)), Err(AccessError::WrongAudience));
    }
    let none = without(claims(), "aud");
    assert_eq!(w.check(&a.sign(&none)), Err(AccessError::WrongAudience));
}

#[test]
fn the_issuer_must_be_the_team() {
    let a = key_a();
    let w = World::new(&[&a]);
    for iss in [
        json!("https://evil.cloudflareaccess.com"),
        json!("https://acme.cloudflareaccess.com/"),
        json!("http://acme.cloudflareaccess.com"),
        json!(null),
        json!(1),
    ] {
        let c = with(claims(), "iss", iss);
        assert_eq!(w.check(&a.sign(&c)), Err(AccessError::WrongIssuer));
    }
}

#[test]
fn times_are_checked_with_a_small_leeway() {
    let a = key_a();
    let w = World::new(&[&a]);
    let exp = NOW_S + 100;
    let token = a.sign(&with(claims(), "exp", json!(exp)));
    assert!(w.check_at(&token, exp + CLOCK_LEEWAY_S - 1).is_ok());
    assert_eq!(
        w.check_at(&token, exp + CLOCK_LEEWAY_S),
        Err(AccessError::Expired)
    );
    assert_eq!(w.check_at(&token, exp + 86_400), Err(AccessError::Expired));

    let nbf = a.sign(&with(claims(), "nbf", json!(NOW_S + CLOCK_LEEWAY_S + 1)));
    assert_eq!(w.check(&nbf), Err(AccessError::NotYetValid));
    let nbf_in_leeway = a.sign(&with(claims(), "nbf", json!(NOW_S + CLOCK_LEEWAY_S)));
    assert!(w.check(&nbf_in_leeway).is_ok());
    let iat = a.sign(&with(claims(), "iat", json!(NOW_S + 3_000)));
    assert_eq!(w.check(&iat), Err(AccessError::NotYetValid));

    let no_exp = without(claims(), "exp");
    assert_eq!(
        w.check(&a.sign(&no_exp)),
        Err(AccessError::Malformed("exp"))
    );
    let text_exp = a.sign(&with(claims(), "exp", json!("tomorrow")));
    assert_eq!(w.check(&text_exp), Err(AccessError::Malformed("exp")));
    // Huge and fractional numbers saturate instead of overflowing.
    let far = a.sign(&with(claims(), "exp", json!(1e300)));
    assert_eq!(w.check(&far).map(|i| i.exp_s), Ok(i64::MAX));
    let past = a.sign(&with(claims(), "exp", json!(-1e300)));
    assert_eq!(w.check(&past), Err(AccessError::Expired));
    let big = a.sign(&with(claims(), "exp", json!(u64::MAX)));
    assert_eq!(w.check(&big).map(|i| i.exp_s), Ok(i64::MAX));
    let frac = a.sign(&with(claims(), "exp", json!(NOW_S as f64 + 100.5)));
    assert!(w.check(&frac).is_ok());
    // Extreme clocks give an answer, not an overflow.
    assert_eq!(w.check_at(&frac, i64::MAX), Err(AccessError::Expired));
    assert_eq!(w.check_at(&frac, i64::MIN), Err(AccessError::NotYetValid));
}

#[test]
fn a_bad_signature_is_refused() {
    let a = key_a();
    let b = key_b();
    let w = World::new(&[&a]);
    let token = a.sign(&claims());
    let (input, sig) = token.rsplit_once('.').expect("three parts");

    // The payload changed after signing.
    let (header, _) = input.split_once('.').expect("header");
    let forged = with(claims(), "email", json!("mallory@example.com"));
    let tampered = format!("{header}.{}.{sig}", b64(&forged));
    assert_eq!(w.check(&tampered), Err(AccessError::BadSignature));

    // Signed by another key under key A's id.
    let impostor = b.sign_with_header(&json!({"alg": "RS256", "kid": "kid-a"}), &claims());
    assert_eq!(w.check(&impostor), Err(AccessError::BadSignature));

    // One bit of the signature flipped.
    let mut raw = URL_SAFE_NO_PAD.decode(sig).expect("sig");
    raw[10] ^= 1;
    let flipped = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&raw));
    assert_eq!(w.check(&flipped), Err(AccessError::BadSignature));

    // A signature of the wrong length never reaches the verifier.
    let calls = *w.verifier.calls.borrow();
    let short = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&raw[..100]));
    assert_eq!(w.check(&short), Err(AccessError::BadSignature));
    let empty = format!("{input}.");
    assert_eq!(w.check(&empty), Err(AccessError::BadSignature));
    assert_eq!(*w.verifier.calls.borrow(), calls);
}

#[test]
fn an_unknown_key_id_refetches_once_then_is_throttled() {
    let a = key_a();
    let b = key_b();
    let w = World::new(&[&a]);
    w.check(&a.sign(&claims())).expect("warm the cache");
    assert_eq!(w.certs.count(), 1);

    // Within the interval of that fetch an unknown kid fetches nothing.
    assert_eq!(
        w.check_at(&b.sign(&claims()), NOW_S + 5),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(w.certs.count(), 1);

    // Access rotated to key B: past the interval the unknown kid refetches
    // and finds it.
    w.certs.serve(Ok(certs(&[&a, &b])));
    let rotated = NOW_S + JWKS_REFETCH_MIN_INTERVAL_S;
    let who = w.check_at(&b.sign(&claims()), rotated);
    assert!(who.is_ok(), "{who:?}");
    assert_eq!(w.certs.count(), 2);
    assert_eq!(w.cache.len(), 2);

    // Made-up kids right after: refused without another fetch.
    let c = Key {
        kid: "kid-made-up",
        pair: key_b().pair,
    };
    for s in 1..=5 {
        assert_eq!(
            w.check_at(&c.sign(&claims()), rotated + s),
            Err(AccessError::UnknownKey)
        );
    }
    assert_eq!(w.certs.count(), 2, "unknown kids must not each fetch");

    // After the interval one more refetch is allowed (and finds nothing).
    let later = rotated + JWKS_REFETCH_MIN_INTERVAL_S;
    assert_eq!(
        w.check_at(&c.sign(&claims()), later),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(w.certs.count(), 3);
    assert_eq!(
        w.check_at(&c.sign(&claims()), later + 1),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(w.certs.count(), 3);
    // Known keys keep passing meanwhile.
    assert!(w.check_at(&a.sign(&claims()), later + 2).is_ok());
}

#[test]
fn an_unknown_key_is_refused_when_the_refetch_does_not_have_it() {
    let a = key_a();
    let b = key_b();
    let w = World::new(&[&a]);
    assert_eq!(w.check(&b.sign(&claims())), Err(AccessError::UnknownKey));
    assert_eq!(w.certs.count(), 1);
}

#[test]
fn keys_expire_after_the_ttl_and_survive_a_certs_outage_for_a_while() {
    let a = key_a();
    let w = World::new(&[&a]);
    w.check(&a.sign(&claims())).expect("first");
    let token = |t: i64| {
        a.sign(&with(
            with(claims(), "exp", json!(t + 600)),
            "iat",
            json!(t),
        ))
    };

    // Past the TTL the set is fetched again.
    let t1 = NOW_S + JWKS_TTL_S;
    w.check_at(&token(t1), t1).expect("refetched");
    assert_eq!(w.certs.count(), 2);

    // The certs endpoint fails: the expired set still serves its keys...
    w.certs.serve(Err("503".into()));
    let t2 = t1 + JWKS_TTL_S;
    w.check_at(&token(t2), t2).expect("stale key during outage");
    assert_eq!(w.certs.count(), 3);
    // ...without a fetch per request while the failure is recent...
    w.check_at(&token(t2 + 1), t2 + 1).expect("no refetch");
    assert_eq!(w.certs.count(), 3);
    // ...but not past the stale bound.
    let t3 = t1 + JWKS_STALE_MAX_S;
    assert_eq!(
        w.check_at(&token(t3), t3),
        Err(AccessError::KeysUnavailable)
    );
    assert_eq!(AccessError::KeysUnavailable.status(), 503);

    // Garbage from the endpoint counts as a failure too; recovery is seen.
    let t4 = t3 + JWKS_REFETCH_MIN_INTERVAL_S;
    w.certs.serve(Ok(b"<html>oops</html>".to_vec()));
    assert_eq!(
        w.check_at(&token(t4), t4),
        Err(AccessError::KeysUnavailable)
    );
    w.certs.serve(Ok(certs(&[&a])));
    let t5 = t4 + JWKS_REFETCH_MIN_INTERVAL_S;
    w.check_at(&token(t5), t5).expect("recovered");
}

#[test]
fn a_cold_cache_with_the_certs_down_answers_503_and_retries_later() {
    let a = key_a();
    let w = World::new(&[&a]);
    w.certs.serve(Err("connection refused".into()));
    assert_eq!(
        w.check(&a.sign(&claims())),
        Err(AccessError::KeysUnavailable)
    );
    assert_eq!(
        w.check_at(&a.sign(&claims()), NOW_S + 1),
        Err(AccessError::KeysUnavailable)
    );
    assert_eq!(w.certs.count(), 1);
    w.certs.serve(Ok(certs(&[&a])));
    let later = NOW_S + JWKS_REFETCH_MIN_INTERVAL_S;
    assert!(w.check_at(&a.sign(&claims()), later).is_ok());
    assert_eq!(w.certs.count(), 2);
}

#[test]
fn alg_none_and_hmac_are_refused_before_any_key_is_fetched() {
    let a = key_a();
    let w = World::new(&[&a]);
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "kid": "kid-a"})),
        b64(&claims())
    );
    assert_eq!(w.check(&none), Err(AccessError::BadAlgorithm));

    // HS256 keyed with the public key's bytes: the classic confusion.
    let header = json!({"alg": "HS256", "kid": "kid-a", "typ": "JWT"});
    let input = format!("{}.{}", b64(&header), b64(&claims()));
    let secret = a.jwk()["n"].as_str().unwrap_or_default().to_owned();
    let mut mac =
        <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("hmac");
    mac.update(input.as_bytes());
    let hs = format!(
        "{input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(w.check(&hs), Err(AccessError::BadAlgorithm));

    for alg in [
        json!("RS512"),
        json!("rs256"),
        json!("PS256"),
        json!(null),
        json!(["RS256"]),
    ] {
        let t = a.sign_with_header(&json!({"alg": alg, "kid": "kid-a"}), &claims());
        assert_eq!(w.check(&t), Err(AccessError::BadAlgorithm), "{alg}");
    }
    let no_alg = a.sign_with_header(&json!({"kid": "kid-a"}), &claims());
    assert_eq!(w.check(&no_alg), Err(AccessError::BadAlgorithm));
    assert_eq!(w.certs.count(), 0, "a refused algorithm fetched keys");
    assert_eq!(*w.verifier.calls.borrow(), 0);
}

#[test]
fn malformed_tokens_are_refused_and_nothing_panics() {
    let a = key_a();
    let w = World::new(&[&a]);
    let good = a.sign(&claims());
    let mut cases: Vec<String> = [
        "",
        " ",
        ".",
        "..",
        "...",
        "a",
        "a.b",
        "a.b.c.d",
        "!!.??.**",
        "e30.e30.e30",
        "eyJhbGciOiJSUzI1NiJ9.e30.AAAA",
        "e30=.e30.AA",
        "bnVsbA.bnVsbA.AA",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cases.push("A".repeat(TOKEN_CHARS_MAX + 1));
    cases.push(format!("{good}.extra"));
    cases.push(good.replacen('.', "..", 1));
    cases.push(format!("{}.{}.", b64(&json!([1, 2])), b64(&claims())));
    cases.push(format!(
        "{}.{}.",
        b64(&json!({"alg": "RS256", "kid": ""})),
        b64(&claims())
    ));
    cases.push(format!(
        "{}.{}.",
        b64(&json!({"alg": "RS256", "kid": 5})),
        b64(&claims())
    ));
    cases.push(format!(
        "{}.{}.",
        b64(&json!({"alg": "RS256", "kid": "kid-a", "crit": ["exp"]})),
        b64(&claims())
    ));
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    cases.push(format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(&deep),
        b64(&claims())
    ));
    for c in &cases {
        let r = w.check(c);
        assert!(
            matches!(
                r,
                Err(AccessError::Malformed(_)) | Err(AccessError::BadAlgorithm)
            ),
            "{c:.60}: {r:?}"
        );
    }
    // Every one-character change of a valid token is refused, never a panic.
    let alphabet = ['A', '_', '.', 'é'];
    for i in 0..good.len() {
        for ch in alphabet {
            let mut t: String = good[..i].to_owned();
            t.push(ch);
            t.push_str(&good[i + 1..]);
            if t != good {
                assert!(w.check(&t).is_err(), "a changed token passed at {i}");
            }
        }
    }
    // Payload garbage under a valid signature is refused, not a panic.
    let payloads = [
        json!([1]),
        json!("x"),
        json!(null),
        json!({"exp": {"a": 1}}),
    ];
    for p in payloads {
        assert!(w.check(&a.sign(&p)).is_err());
    }
    let missing = block_on(verify(None, &w.cfg, &w.cache, &w.certs, &w.verifier, NOW_S));
    assert_eq!(missing, Err(AccessError::Missing));
}

#[test]
fn the_jwks_keeps_only_usable_rsa_keys() {
    let a = key_a();
    let mut doc: Value = serde_json::from_slice(&certs(&[&a])).expect("certs");
    let keys = doc["keys"].as_array_mut().expect("keys");
    keys.push(json!({"kid": "ec", "kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}));
    keys.push(json!({"kid": "small", "kty": "RSA", "n": "AQAB", "e": "AQAB"}));
    keys.push(json!({"kid": "ps", "kty": "RSA", "alg": "PS256", "n": a.jwk()["n"], "e": "AQAB"}));
    keys.push(json!({"kid": "garbage", "kty": "RSA", "n": "!!!", "e": "AQAB"}));
    keys.push(json!({"kid": "enc", "kty": "RSA", "use": "enc", "n": a.jwk()["n"], "e": "AQAB"}));
    keys.push(json!({"kid": "no-e", "kty": "RSA", "n": a.jwk()["n"]}));
    keys.push(json!({"kty": "RSA", "n": a.jwk()["n"], "e": "AQAB"}));
    keys.push(json!("not an object"));
    let parsed = parse_jwks(doc.to_string().as_bytes()).expect("parsed");
    let kids: Vec<&str> = parsed.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(kids, ["kid-a"]);
    assert!(parse_jwks(b"{}").is_err());
    assert!(parse_jwks(b"not json").is_err());
    assert!(parse_jwks(&vec![b' '; 1024 * 1024]).is_err());
    let no_alg: Value =
        json!({"keys": [{"kid": "k", "kty": "RSA", "n": a.jwk()["n"], "e": "AQAB"}]});
    assert_eq!(
        parse_jwks(no_alg.to_string().as_bytes()).map(|k| k.len()),
        Ok(1)
    );
}

#[test]
fn the_team_is_normalized_and_checked() {
    for team in [
        "acme",
        "ACME",
        "acme.cloudflareaccess.com",
        "https://acme.cloudflareaccess.com",
        "https://acme.cloudflareaccess.com/",
    ] {
        let cfg = AccessConfig::new(team, AUD).expect(team);
        assert_eq!(cfg.issuer(), ISSUER);
        assert_eq!(cfg.certs_url(), CERTS);
    }
    for team in ["", "a b", "evil.com/x", "-x", "x..y", "https://", "a@b"] {
        assert!(AccessConfig::new(team, AUD).is_err(), "{team:?}");
    }
    assert!(AccessConfig::new("acme", " ").is_err());
}

#[test]
fn keys_come_from_the_team_or_a_loopback_server_and_nowhere_else() {
    let cfg = AccessConfig::new("acme", AUD).unwrap();
    let local = cfg
        .clone()
        .with_certs_url("http://127.0.0.1:8788/certs")
        .unwrap();
    assert_eq!(local.certs_url(), "http://127.0.0.1:8788/certs");
    assert_eq!(local.issuer(), ISSUER, "the issuer stays the team's");
    for ok in ["http://localhost:9/k", "http://[::1]:9/k"] {
        assert!(cfg.clone().with_certs_url(ok).is_ok(), "{ok}");
    }
    for url in [
        "https://evil.example/certs",
        "http://evil.example/certs",
        "http://127.0.0.1.evil.example/certs",
        "http://localhost.evil.example:80/x",
        "ftp://127.0.0.1:21/certs",
        "http://127.0.0.1:1/a b",
        "http://127.0.0.1:@evil.example/certs",
        "http://localhost:x@evil.example/certs",
        "http://[::1]:@evil.example:8080/certs",
        "http://user@127.0.0.1:8788/certs",
    ] {
        let e = cfg.clone().with_certs_url(url).unwrap_err();
        assert!(e.contains("loopback"), "{url}: {e}");
    }
}

#[test]
fn errors_have_stable_tags_messages_and_statuses() {
    let cases = [
        (AccessError::Missing, "missing", 401),
        (AccessError::Malformed("kid"), "malformed", 401),
        (AccessError::BadAlgorithm, "bad_alg", 401),
        (AccessError::UnknownKey, "unknown_kid", 401),
        (AccessError::BadSignature, "bad_signature", 401),
        (AccessError::Expired, "expired", 401),
        (AccessError::NotYetValid, "not_yet_valid", 401),
        (AccessError::WrongAudience, "wrong_audience", 401),
        (AccessError::WrongIssuer, "wrong_issuer", 401),
        (AccessError::KeysUnavailable, "keys_unavailable", 503),
        (AccessError::VerifierFailed, "verifier_failed", 503),
    ];
    for (e, tag, status) in cases {
        assert_eq!(e.tag(), tag);
        assert_eq!(e.status(), status);
        assert!(!e.to_string().is_empty());
        let api: ApiError = access::refusal(e.clone());
        assert_eq!(api.status, status);
    }
    assert_eq!(
        AccessError::Malformed("kid").to_string(),
        "malformed token: kid"
    );
    assert_eq!(
        access::refusal(AccessError::Expired).message,
        "Cloudflare Access: the token has expired"
    );
    assert_eq!(
        access::refusal(AccessError::Missing).message,
        "no Cf-Access-Jwt-Assertion header"
    );
}

/// A verifier that fails (WebCrypto threw): 503, not a verdict.
struct Broken;

#[async_trait(?Send)]
impl Rs256Verify for Broken {
    async fn verify(&self, _: &Jwk, _: &[u8], _: &[u8]) -> Result<bool, String> {
        Err("importKey failed".into())
    }
}

#[test]
fn a_verifier_failure_is_not_a_verdict() {
    let a = key_a();
    let w = World::new(&[&a]);
    let r = block_on(verify(
        Some(&a.sign(&claims())),
        &w.cfg,
        &w.cache,
        &w.certs,
        &Broken,
        NOW_S,
    ));
    assert_eq!(r, Err(AccessError::VerifierFailed));
}
