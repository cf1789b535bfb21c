//! Dispatch proves where it comes from, natively: GitHub Actions OIDC
//! tokens signed with the test-only keys and checked by the shared RS256
//! verifier (`http::oidc` over `http::jwt`, with ring standing in for
//! WebCrypto), the rule that weighs what a dispatch proved against the
//! operator's environment (`Environments::dispatch_check`), the plan
//! through the fake GitHub, and the deploy's own grant step.

mod common;

use common::fakes::*;
use common::keys::{b64, key_a, key_b, FakeKeys, Key, RingVerify};
use common::{block_on, T0};
use serde_json::{json, Value};
use sluice::engine::{CreateRequest, Status};
use sluice::http::dispatch::{self, Proof};
use sluice::http::jwt::{JwksCache, JwtError};
use sluice::http::oidc::{
    self, OidcConfig, OidcKeys, VerifiedToken, GITHUB_ACTIONS_ISSUER, OIDC_CLOCK_LEEWAY_S,
};
use sluice::runs::environment::{ActionsOrigin, DispatchRefusal, Environments};
use sluice::runs::inputs::DeployInput;

const KEYS_URL: &str = "https://token.actions.githubusercontent.com/.well-known/jwks";
const NOW_S: i64 = T0 / 1000;
/// The deploy policy of the default branch: main deploys to production,
/// which the rig's `ENVIRONMENTS` restricts to main.
const PRODUCTION_TOML: &str =
    "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n";
const SECRET_VALUE: &str = "s3cr3t-deploy-token-value";

/// The claims GitHub issues for a job of `REPO` on `branch` (the shape of
/// GitHub's documented example), valid at `NOW_S`: issued now, not before
/// ten minutes ago, expiring in five.
fn claims(branch: &str) -> Value {
    json!({
        "jti": format!("{branch}-6f4762ed-0758-4ccb-808d-ee3af5d723a8"),
        "sub": format!("repo:{REPO}:ref:refs/heads/{branch}"),
        "aud": PUBLIC_URL,
        "ref": format!("refs/heads/{branch}"),
        "sha": "a".repeat(40),
        "repository": REPO,
        "repository_owner": "octo",
        "repository_visibility": "private",
        "run_id": "5461546211",
        "run_number": "12",
        "run_attempt": "1",
        "actor": "ana",
        "workflow": "deploy",
        "workflow_ref": format!("{REPO}/.github/workflows/deploy.yml@refs/heads/{branch}"),
        "event_name": "workflow_dispatch",
        "ref_type": "branch",
        "runner_environment": "github-hosted",
        "iss": GITHUB_ACTIONS_ISSUER,
        "nbf": NOW_S - 600,
        "exp": NOW_S + 300,
        "iat": NOW_S,
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

/// GitHub's issuer as the Worker sees it: its keys (key A) behind a strict
/// fake, a cache, and the audience the rig's Worker expects.
struct Issuer {
    cfg: OidcConfig,
    cache: JwksCache,
    keys: FakeKeys,
}

impl Issuer {
    fn serving(keys: &[&Key]) -> Issuer {
        Issuer {
            cfg: OidcConfig::new(None, None, Some(&format!("{PUBLIC_URL}/"))).expect("config"),
            cache: JwksCache::new(),
            keys: FakeKeys::serving(KEYS_URL, keys),
        }
    }

    fn check_at(&self, token: &str, now_s: i64) -> Result<VerifiedToken, JwtError> {
        let keys = OidcKeys {
            cache: &self.cache,
            fetch: &self.keys,
            verifier: &RingVerify,
        };
        block_on(oidc::verify(token, &self.cfg, &keys, now_s))
    }

    fn check(&self, token: &str) -> Result<VerifiedToken, JwtError> {
        self.check_at(token, NOW_S)
    }
}

#[test]
fn a_github_token_proves_its_repository_branch_and_environment() {
    let a = key_a();
    let issuer = Issuer::serving(&[&a]);
    let token = a.sign(&with(claims("main"), "environment", json!("production")));
    let passed = issuer.check(&token).expect("a valid token");
    assert_eq!(
        passed.origin,
        ActionsOrigin {
            repository: REPO.into(),
            git_ref: "refs/heads/main".into(),
            environment: Some("production".into()),
            workflow_ref: Some(format!(
                "{REPO}/.github/workflows/deploy.yml@refs/heads/main"
            )),
            actor: Some("ana".into()),
        }
    );
    assert_eq!(passed.exp_s, NOW_S + 300);
    assert_eq!(passed.id.len(), 16);
    assert!(passed.id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(*issuer.keys.fetched.borrow(), [KEYS_URL]);

    // The same token is the same id; another token (another jti) another.
    assert_eq!(issuer.check(&token).expect("again").id, passed.id);
    let other = issuer
        .check(&a.sign(&with(claims("main"), "jti", json!("another-jti"))))
        .expect("another token");
    assert_ne!(other.id, passed.id);
    assert_eq!(issuer.keys.fetched.borrow().len(), 1, "the keys are cached");
    // A job in no environment proves none.
    let plain = issuer.check(&a.sign(&claims("main"))).expect("valid");
    assert_eq!(plain.origin.environment, None);
}

#[test]
fn a_token_for_another_audience_issuer_or_time_is_refused() {
    let a = key_a();
    let issuer = Issuer::serving(&[&a]);
    // GitHub's default audience (the owner's URL) reaches every service a
    // workflow talks to: never this one.
    for aud in [
        json!("https://github.com/octo"),
        json!("https://sluice.example.test/other"),
        json!([]),
        json!(null),
    ] {
        let t = a.sign(&with(claims("main"), "aud", aud.clone()));
        assert_eq!(
            issuer.check(&t).map(|_| ()),
            Err(JwtError::WrongAudience),
            "{aud}"
        );
    }
    let listed = a.sign(&with(claims("main"), "aud", json!(["x", PUBLIC_URL])));
    assert!(issuer.check(&listed).is_ok(), "a list holding the audience");
    for iss in [
        "https://token.actions.githubusercontent.com/acme",
        "https://evil.example",
        "",
    ] {
        let t = a.sign(&with(claims("main"), "iss", json!(iss)));
        assert_eq!(
            issuer.check(&t).map(|_| ()),
            Err(JwtError::WrongIssuer),
            "{iss}"
        );
    }

    // Expired: past `exp` by the leeway, not before.
    let token = a.sign(&claims("main"));
    let exp = NOW_S + 300;
    assert!(issuer
        .check_at(&token, exp + OIDC_CLOCK_LEEWAY_S - 1)
        .is_ok());
    assert_eq!(
        issuer
            .check_at(&token, exp + OIDC_CLOCK_LEEWAY_S)
            .map(|_| ()),
        Err(JwtError::Expired)
    );
    let no_exp = a.sign(&without(claims("main"), "exp"));
    assert_eq!(
        issuer.check(&no_exp).map(|_| ()),
        Err(JwtError::Malformed("exp"))
    );
    // Issued in the future, beyond the leeway.
    for claim in ["nbf", "iat"] {
        let early = a.sign(&with(
            claims("main"),
            claim,
            json!(NOW_S + OIDC_CLOCK_LEEWAY_S + 1),
        ));
        assert_eq!(
            issuer.check(&early).map(|_| ()),
            Err(JwtError::NotYetValid),
            "{claim}"
        );
        let skewed = a.sign(&with(
            claims("main"),
            claim,
            json!(NOW_S + OIDC_CLOCK_LEEWAY_S),
        ));
        assert!(issuer.check(&skewed).is_ok(), "{claim} within the leeway");
    }
}

#[test]
fn a_forged_token_or_one_of_an_unknown_key_is_refused() {
    let (a, b) = (key_a(), key_b());
    let issuer = Issuer::serving(&[&a]);
    let good = a.sign(&claims("main"));

    // Another payload under A's signature: the branch changed.
    let parts: Vec<&str> = good.split('.').collect();
    let tampered = format!("{}.{}.{}", parts[0], b64(&claims("feature")), parts[2]);
    assert_eq!(
        issuer.check(&tampered).map(|_| ()),
        Err(JwtError::BadSignature)
    );

    // B signs, naming A's key id: the signature does not hold under A.
    let impostor = key_b().named(a.kid);
    assert_eq!(
        issuer.check(&impostor.sign(&claims("main"))).map(|_| ()),
        Err(JwtError::BadSignature)
    );
    // B's own key id is not among GitHub's keys (one refetch, then no more
    // within the interval).
    assert_eq!(
        issuer.check(&b.sign(&claims("main"))).map(|_| ()),
        Err(JwtError::UnknownKey)
    );
    assert_eq!(
        issuer.check(&b.sign(&claims("main"))).map(|_| ()),
        Err(JwtError::UnknownKey)
    );
    assert_eq!(issuer.keys.fetched.borrow().len(), 1);

    // No algorithm but RS256.
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "kid": "kid-a"})),
        b64(&claims("main"))
    );
    assert_eq!(issuer.check(&none).map(|_| ()), Err(JwtError::BadAlgorithm));
    for garbage in ["", "a.b", "a.b.c.d", &"A".repeat(20_000)] {
        assert!(
            matches!(issuer.check(garbage), Err(JwtError::Malformed(_))),
            "{garbage:.20}"
        );
    }
}

#[test]
fn a_token_without_the_claims_the_rule_reads_is_malformed() {
    let a = key_a();
    let issuer = Issuer::serving(&[&a]);
    for claim in ["repository", "ref", "jti"] {
        let t = a.sign(&without(claims("main"), claim));
        assert_eq!(
            issuer.check(&t).map(|_| ()),
            Err(JwtError::Malformed(claim)),
            "{claim}"
        );
        let t = a.sign(&with(claims("main"), claim, json!(42)));
        assert_eq!(
            issuer.check(&t).map(|_| ()),
            Err(JwtError::Malformed(claim)),
            "{claim}"
        );
    }
    let env = a.sign(&with(claims("main"), "environment", json!(["production"])));
    assert_eq!(
        issuer.check(&env).map(|_| ()),
        Err(JwtError::Malformed("environment"))
    );
}

#[test]
fn the_issuer_is_githubs_or_a_loopback_stand_in_and_the_audience_the_workers_url() {
    let cfg = OidcConfig::new(None, None, Some("https://sluice.example.com/")).unwrap();
    assert_eq!(cfg.issuer(), GITHUB_ACTIONS_ISSUER);
    assert_eq!(cfg.keys_url(), KEYS_URL);
    assert_eq!(cfg.audience(), "https://sluice.example.com");
    let named = OidcConfig::new(Some(""), Some("sluice-prod"), Some("https://x.test")).unwrap();
    assert_eq!(
        (named.issuer(), named.audience()),
        (GITHUB_ACTIONS_ISSUER, "sluice-prod")
    );

    let local = OidcConfig::new(
        Some("http://127.0.0.1:8790/_standin/oidc/"),
        None,
        Some("http://127.0.0.1:8787"),
    )
    .unwrap();
    assert_eq!(local.issuer(), "http://127.0.0.1:8790/_standin/oidc");
    assert_eq!(
        local.keys_url(),
        "http://127.0.0.1:8790/_standin/oidc/.well-known/jwks"
    );
    for planted in [
        "https://evil.example/oidc",
        "http://evil.example/oidc",
        "http://127.0.0.1.evil.example/oidc",
        "http://127.0.0.1:@evil.example/oidc",
        "https://token.actions.githubusercontent.com/acme",
    ] {
        let e = OidcConfig::new(Some(planted), None, Some("https://x.test")).unwrap_err();
        assert!(e.contains("loopback"), "{planted}: {e}");
    }
    let e = OidcConfig::new(None, None, None).unwrap_err();
    assert!(e.contains("PUBLIC_URL"), "{e}");
}

#[test]
fn a_refused_token_is_a_401_naming_its_reason() {
    let cfg = OidcConfig::new(None, None, Some(PUBLIC_URL)).unwrap();
    let cases = [
        (JwtError::Expired, 401, "oidc_expired"),
        (JwtError::WrongAudience, 401, "oidc_wrong_audience"),
        (JwtError::BadSignature, 401, "oidc_bad_signature"),
        (JwtError::UnknownKey, 401, "oidc_unknown_kid"),
        (JwtError::Malformed("ref"), 401, "oidc_malformed"),
        (JwtError::KeysUnavailable, 503, "oidc_unavailable"),
    ];
    for (e, status, code) in cases {
        let api = oidc::refusal(&e, &cfg);
        assert_eq!((api.status, api.code), (status, code), "{e:?}");
        assert!(
            api.message.starts_with("X-Sluice-OIDC-Token: "),
            "{}",
            api.message
        );
    }
    let aud = oidc::refusal(&JwtError::WrongAudience, &cfg);
    assert!(aud.message.contains(PUBLIC_URL), "{}", aud.message);
}

fn origin(repository: &str, branch: &str, environment: Option<&str>) -> ActionsOrigin {
    ActionsOrigin {
        repository: repository.into(),
        git_ref: format!("refs/heads/{branch}"),
        environment: environment.map(Into::into),
        workflow_ref: None,
        actor: None,
    }
}

#[test]
fn the_dispatch_rule_weighs_what_a_dispatch_proved_against_the_environment() {
    let envs = Environments::parse(Some(
        "[production]\nrepos = [\"octo/*\"]\nbranches = [\"main\"]\n\
         [anywhere]\nrepos = [\"octo/*\"]\nbranches = [\"**\"]\n\
         [one-level]\nrepos = [\"octo/*\"]\nbranches = [\"*\"]\n\
         [asks]\nrepos = [\"octo/*\"]\nbranches = [\"**\"]\ndispatch_oidc = true\n\
         [reviewed]\nrepos = [\"octo/*\"]\nbranches = [\"main\"]\noidc_environment = \"Production\"\n",
    ));
    assert_eq!(envs.error(), None);
    let main = origin(REPO, "main", None);
    let check = |name: Option<&str>, branch: &str, o: Option<&ActionsOrigin>| {
        envs.dispatch_check(name, REPO, branch, o)
    };

    // The key alone: no environment (no secret) and an environment that
    // restricts no branch.
    assert_eq!(check(None, "main", None), Ok(()));
    assert_eq!(check(Some("anywhere"), "feature/x", None), Ok(()));
    // ...but not one that restricts branches, even by `*`, nor one that
    // asks for the token, nor one that does not exist or grant.
    for name in ["production", "one-level", "asks", "reviewed", "nonexistent"] {
        assert_eq!(
            check(Some(name), "main", None),
            Err(DispatchRefusal::TokenRequired),
            "{name}"
        );
    }

    // A token from the dispatched branch of this repository passes.
    assert_eq!(check(Some("production"), "main", Some(&main)), Ok(()));
    assert_eq!(check(Some("asks"), "main", Some(&main)), Ok(()));
    assert_eq!(
        envs.dispatch_check(Some("production"), "OCTO/Hello", "main", Some(&main)),
        Ok(()),
        "repository names compare as GitHub's do"
    );
    // A token minted for another branch, tag or pull request does not.
    let feature = origin(REPO, "feature", None);
    assert_eq!(
        check(Some("production"), "main", Some(&feature)),
        Err(DispatchRefusal::OtherRef {
            token: "refs/heads/feature".into()
        })
    );
    for git_ref in [
        "refs/tags/main",
        "refs/pull/7/merge",
        "refs/heads/main/x",
        "main",
    ] {
        let o = ActionsOrigin {
            git_ref: git_ref.into(),
            ..main.clone()
        };
        assert!(
            matches!(
                check(Some("production"), "main", Some(&o)),
                Err(DispatchRefusal::OtherRef { .. })
            ),
            "{git_ref}"
        );
    }
    let other_repo = origin("octo/other", "main", None);
    assert_eq!(
        check(Some("production"), "main", Some(&other_repo)),
        Err(DispatchRefusal::OtherRepository {
            token: "octo/other".into()
        })
    );
    // A GitHub environment asked for must be the job's (as GitHub names
    // compare, without regard to case).
    assert_eq!(
        check(Some("reviewed"), "main", Some(&main)),
        Err(DispatchRefusal::OtherEnvironment {
            expected: "Production".into(),
            token: None
        })
    );
    let staging = origin(REPO, "main", Some("staging"));
    assert!(matches!(
        check(Some("reviewed"), "main", Some(&staging)),
        Err(DispatchRefusal::OtherEnvironment { .. })
    ));
    assert_eq!(
        check(
            Some("reviewed"),
            "main",
            Some(&origin(REPO, "main", Some("production")))
        ),
        Ok(())
    );
    // An environment that does not exist asks what a restricted one asks
    // and no more: its refusal is the deploy's grant, in the same words as
    // ever.
    assert_eq!(check(Some("nonexistent"), "main", Some(&main)), Ok(()));

    // Every refusal is a code and a sentence that says what would pass.
    let needs = DispatchRefusal::TokenRequired;
    assert_eq!(needs.code(), "oidc_required");
    let sentence = needs.sentence("production", REPO, "main");
    assert!(
        sentence.contains("id-token: write") && sentence.contains("branch `main`"),
        "{sentence}"
    );
    let wrong = DispatchRefusal::OtherRef {
        token: "refs/heads/feature".into(),
    };
    assert_eq!(wrong.code(), "oidc_wrong_ref");
    assert!(wrong
        .sentence("production", REPO, "main")
        .contains("refs/heads/feature"));
}

#[test]
fn environments_declare_the_dispatch_keys_and_refuse_bad_ones() {
    let ok = Environments::parse(Some(
        "[production]\nrepos = [\"a/b\"]\nbranches = [\"**\"]\ndispatch_oidc = true\noidc_environment = \"prod\"\n",
    ));
    assert_eq!(ok.error(), None);
    let (_, e) = ok.iter().next().expect("one");
    assert!(e.dispatch_oidc && !e.restricts_branches() && e.dispatch_needs_token());
    for bad in [
        "\"\"",
        "\" \"",
        &format!("\"{}\"", "x".repeat(256)),
        "\"a\\nb\"",
        "1",
    ] {
        let envs = Environments::parse(Some(&format!(
            "[production]\nrepos = [\"a/b\"]\nbranches = [\"main\"]\noidc_environment = {bad}\n"
        )));
        assert!(envs.error().is_some(), "{bad}");
    }
    let typo = Environments::parse(Some(
        "[production]\nrepos = [\"a/b\"]\nbranches = [\"main\"]\nrequire_oidc = true\n",
    ));
    assert!(
        typo.error().is_some(),
        "an unknown key is refused, never ignored"
    );
}

/// A rig whose default branch deploys main to production, restricted to
/// main by the operator.
fn production_rig(head: &str) -> Rig {
    let rig = deploy_rig(&[head], PRODUCTION_TOML);
    rig.github.set_head(REPO, BRANCH, head);
    rig.secrets.set("DEPLOY_TOKEN", SECRET_VALUE);
    rig
}

fn plan_with(
    rig: &Rig,
    body: Value,
    signature: &str,
    token: Option<&VerifiedToken>,
) -> Result<CreateRequest, (u16, &'static str, String)> {
    let req = dispatch::parse(body.to_string().as_bytes()).expect("valid");
    let registry = rig.registry();
    let proof = Proof {
        signature_hex: signature,
        token,
    };
    let env = &registry.env;
    block_on(dispatch::plan(&env.github, env.environments, &req, &proof))
        .map_err(|e| (e.status, e.code, e.message))
}

fn verified(claims: Value) -> VerifiedToken {
    let a = key_a();
    Issuer::serving(&[&a])
        .check(&a.sign(&claims))
        .expect("valid token")
}

#[test]
fn the_key_alone_dispatches_checks_but_no_deploy_into_a_restricted_environment() {
    let a = sha('a');
    let rig = production_rig(&a);
    rig.github.commit(
        REPO,
        &a,
        &[(
            ".sluice.toml",
            &format!("{PRODUCTION_TOML}[check]\ncommand = \"true\"\n"),
        )],
    );

    let refused = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO}),
        "0123456789abcdef",
        None,
    );
    let (status, code, message) = refused.expect_err("refused");
    assert_eq!((status, code), (403, "oidc_required"));
    assert!(
        message.contains("environment `production`") && message.contains("id-token: write"),
        "{message}"
    );
    let rollback = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO, "sha": a}),
        "0123456789abcdef",
        None,
    );
    assert_eq!(
        rollback.map(|_| ()).map_err(|e| e.1),
        Err("oidc_required"),
        "a rollback no less"
    );

    let check = plan_with(
        &rig,
        json!({"run": "check", "repo": REPO, "branch": BRANCH}),
        "0123456789abcdef",
        None,
    )
    .expect("a check needs no token");
    assert_eq!(check.key, format!("check:{REPO}:dispatch-0123456789abcdef"));

    // An environment that restricts no branch takes the key alone.
    let mut open = production_rig(&a);
    open.environments = Environments::parse(Some(
        "[production]\nrepos = [\"octo/hello\"]\nbranches = [\"**\"]\nsecrets = [\"DEPLOY_TOKEN\"]\n",
    ));
    let planned = plan_with(
        &open,
        json!({"run": "deploy", "repo": REPO}),
        "0123456789abcdef",
        None,
    )
    .expect("unrestricted");
    let input: DeployInput = serde_json::from_value(planned.input).unwrap();
    assert_eq!(
        input.dispatch.map(|d| d.origin),
        Some(None),
        "recorded: the key alone"
    );
}

#[test]
fn a_token_from_the_dispatched_branch_deploys_and_one_of_another_does_not() {
    let a = sha('a');
    let rig = production_rig(&a);
    let main = verified(claims("main"));
    let planned = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO}),
        "0123456789abcdef",
        Some(&main),
    )
    .expect("planned");
    let input: DeployInput = serde_json::from_value(planned.input.clone()).unwrap();
    assert_eq!(
        input.dispatch.and_then(|d| d.origin),
        Some(main.origin.clone())
    );
    assert_eq!(
        planned.key,
        format!("deploy:{REPO}:dispatch-oidc-{}", main.id)
    );
    // One token, one run: another request (another signature) with the
    // same token names the same instance.
    let again = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO, "inputs": {"X": "1"}}),
        "fedcba9876543210",
        Some(&main),
    )
    .expect("planned");
    assert_eq!(again.key, planned.key);

    let feature = verified(claims("feature"));
    let refused = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO}),
        "0123456789abcdef",
        Some(&feature),
    );
    let (status, code, message) = refused.expect_err("another branch's token");
    assert_eq!((status, code), (403, "oidc_wrong_ref"));
    assert!(message.contains("refs/heads/feature"), "{message}");

    let other = verified(with(claims("main"), "repository", json!("octo/other")));
    let refused = plan_with(
        &rig,
        json!({"run": "check", "repo": REPO, "branch": BRANCH}),
        "0123456789abcdef",
        Some(&other),
    );
    assert_eq!(
        refused.map(|_| ()).map_err(|e| (e.0, e.1)),
        Err((403, "oidc_wrong_repository")),
        "whatever the run"
    );
}

/// The policy may change between the dispatch and the deploy: the deploy's
/// grant step weighs what the dispatch proved again, on the policy it reads.
#[test]
fn the_deploy_weighs_the_proof_again_on_the_policy_it_reads() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    rig.secrets.set("DEPLOY_TOKEN", SECRET_VALUE);
    rig.github.set_on_branch(REPO, BRANCH, &a);
    // No environment yet: the key alone may dispatch.
    let keyed = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO, "sha": a}),
        "0123456789abcdef",
        None,
    )
    .expect("planned");
    let main = verified(claims("main"));
    let tokened = plan_with(
        &rig,
        json!({"run": "deploy", "repo": REPO, "sha": a}),
        "fedcba9876543210",
        Some(&main),
    )
    .expect("planned");
    // Then a merge selects production.
    rig.github
        .commit(REPO, &b, &[(".sluice.toml", PRODUCTION_TOML)]);
    rig.github.set_head(REPO, BRANCH, &b);

    let keyed = rig.create(keyed);
    assert_eq!(rig.run_to_end(&keyed), Status::Complete);
    assert!(
        rig.sandbox.starts_in(&keyed.id).is_empty(),
        "the key alone deployed nothing"
    );
    let run = rig
        .github
        .check_runs_on(&a)
        .into_iter()
        .find(|r| r.external_id.as_deref() == Some(keyed.id.as_str()))
        .expect("its check run");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(run.summary().contains("OIDC token"), "{}", run.summary());

    let tokened = rig.create(tokened);
    assert_eq!(rig.run_to_end(&tokened), Status::Complete);
    assert_eq!(
        rig.sandbox.runs_in(&tokened.id).len(),
        1,
        "the token's deploy ran"
    );
}
