//! Sluice's interfaces implemented on the Workers platform.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use js_sys::{Array, Object, Reflect, Uint8Array};
use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::worker_sys::{SqlStorage as SqlStorageSys, SqlStorageCursor};
use worker::{D1Database, Delay, Fetch, Headers, Method, Request, RequestInit, SqlStorage};

use crate::blobs::Blobs;
use crate::clock::Clock;
use crate::github::app::Rs256Signer;
use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::store::{Database, Param, Row, Stmt, StoreError, SyncSql, Usage};

// --- time ---

pub struct WorkerClock;

impl Clock for WorkerClock {
    fn now_ms(&self) -> i64 {
        // The static `Date.now()`: `worker::Date::now()` builds a `Date`
        // object for each reading, and an instance reads the clock often.
        js_sys::Date::now() as i64
    }

    fn sleep(&self, ms: i64) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(Delay::from(Duration::from_millis(ms.max(0) as u64)))
    }
}

// --- D1 ---

pub struct D1(pub D1Database);

fn js_param(p: &Param) -> JsValue {
    match p {
        Param::Null => JsValue::NULL,
        Param::Int(n) => JsValue::from_f64(*n as f64),
        Param::Real(f) => JsValue::from_f64(*f),
        Param::Text(s) => JsValue::from_str(s),
    }
}

fn store_err(e: worker::Error) -> StoreError {
    StoreError::Query(e.to_string())
}

fn to_rows(values: Vec<Value>) -> Vec<Row> {
    values
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect()
}

impl D1 {
    fn prepare(&self, stmt: &Stmt) -> Result<worker::D1PreparedStatement, StoreError> {
        let params: Vec<JsValue> = stmt.params.iter().map(js_param).collect();
        self.0
            .prepare(stmt.sql.as_ref())
            .bind(&params)
            .map_err(store_err)
    }
}

#[async_trait(?Send)]
impl Database for D1 {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        let result = self.prepare(&stmt)?.all().await.map_err(store_err)?;
        Ok(to_rows(result.results::<Value>().map_err(store_err)?))
    }

    async fn all_counted(&self, stmt: Stmt) -> Result<(Vec<Row>, Usage), StoreError> {
        let result = self.prepare(&stmt)?.all().await.map_err(store_err)?;
        let usage = usage_of(&result)?;
        Ok((
            to_rows(result.results::<Value>().map_err(store_err)?),
            usage,
        ))
    }

    async fn run_counted(&self, stmt: Stmt) -> Result<(u64, Usage), StoreError> {
        let result = self.prepare(&stmt)?.run().await.map_err(store_err)?;
        let changes = result
            .meta()
            .map_err(store_err)?
            .and_then(|m| m.changes)
            .unwrap_or(0) as u64;
        Ok((changes, usage_of(&result)?))
    }

    async fn batch_counted(&self, stmts: Vec<Stmt>) -> Result<(Vec<u64>, Usage), StoreError> {
        let prepared = stmts
            .iter()
            .map(|s| self.prepare(s))
            .collect::<Result<Vec<_>, _>>()?;
        let results = self.0.batch(prepared).await.map_err(store_err)?;
        let mut usage = Usage::default();
        let mut changes = Vec::with_capacity(results.len());
        for r in &results {
            let u = usage_of(r)?;
            usage.rows_read += u.rows_read;
            usage.rows_written += u.rows_written;
            changes.push(
                r.meta()
                    .map_err(store_err)?
                    .and_then(|m| m.changes)
                    .unwrap_or(0) as u64,
            );
        }
        Ok((changes, usage))
    }

    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        let result = self.prepare(&stmt)?.run().await.map_err(store_err)?;
        Ok(result
            .meta()
            .map_err(store_err)?
            .and_then(|m| m.changes)
            .unwrap_or(0) as u64)
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        let prepared = stmts
            .iter()
            .map(|s| self.prepare(s))
            .collect::<Result<Vec<_>, _>>()?;
        let results = self.0.batch(prepared).await.map_err(store_err)?;
        results
            .iter()
            .map(|r| {
                Ok(r.meta()
                    .map_err(store_err)?
                    .and_then(|m| m.changes)
                    .unwrap_or(0) as u64)
            })
            .collect()
    }
}

/// What D1 reports a statement read and wrote (what it bills).
fn usage_of(result: &worker::D1Result) -> Result<Usage, StoreError> {
    let meta = result.meta().map_err(store_err)?;
    Ok(Usage {
        rows_read: meta.as_ref().and_then(|m| m.rows_read).unwrap_or(0) as u64,
        rows_written: meta.as_ref().and_then(|m| m.rows_written).unwrap_or(0) as u64,
    })
}

// --- a Durable Object's own SQLite storage ---

pub struct DoSql(pub SqlStorage);

/// `SqlStorage.exec` with its bindings as arguments: `worker`'s binding is
/// variadic, so each statement built an array a push at a time and
/// JavaScript spread it into the call. Paired, the fixed calls made a
/// durable step 0.857x (issue 26, docs/capacity.md).
macro_rules! fixed_exec {
    ($($name:ident($($arg:ident),*);)*) => {
        #[wasm_bindgen::prelude::wasm_bindgen]
        extern "C" {
            /// `ctx.storage.sql`, as these calls see it.
            type FixedSql;
            $(
                #[wasm_bindgen(method, catch, js_name = exec)]
                fn $name(
                    this: &FixedSql,
                    query: &str,
                    $($arg: &JsValue),*
                ) -> Result<SqlStorageCursor, JsValue>;
            )*
        }
    };
}

fixed_exec! {
    exec0();
    exec1(a);
    exec2(a, b);
    exec3(a, b, c);
    exec4(a, b, c, d);
    exec5(a, b, c, d, e);
    exec6(a, b, c, d, e, f);
    exec7(a, b, c, d, e, f, g);
    exec8(a, b, c, d, e, f, g, h);
    exec9(a, b, c, d, e, f, g, h, i);
    exec10(a, b, c, d, e, f, g, h, i, j);
    exec11(a, b, c, d, e, f, g, h, i, j, k);
    exec12(a, b, c, d, e, f, g, h, i, j, k, l);
}

/// A statement run by a fixed call, or None past twelve bindings (the
/// journal's widest write binds twelve).
fn exec_fixed(
    sql: &FixedSql,
    q: &str,
    bound: &[JsValue],
) -> Option<Result<SqlStorageCursor, JsValue>> {
    Some(match bound {
        [] => sql.exec0(q),
        [a] => sql.exec1(q, a),
        [a, b] => sql.exec2(q, a, b),
        [a, b, c] => sql.exec3(q, a, b, c),
        [a, b, c, d] => sql.exec4(q, a, b, c, d),
        [a, b, c, d, e] => sql.exec5(q, a, b, c, d, e),
        [a, b, c, d, e, f] => sql.exec6(q, a, b, c, d, e, f),
        [a, b, c, d, e, f, g] => sql.exec7(q, a, b, c, d, e, f, g),
        [a, b, c, d, e, f, g, h] => sql.exec8(q, a, b, c, d, e, f, g, h),
        [a, b, c, d, e, f, g, h, i] => sql.exec9(q, a, b, c, d, e, f, g, h, i),
        [a, b, c, d, e, f, g, h, i, j] => sql.exec10(q, a, b, c, d, e, f, g, h, i, j),
        [a, b, c, d, e, f, g, h, i, j, k] => sql.exec11(q, a, b, c, d, e, f, g, h, i, j, k),
        [a, b, c, d, e, f, g, h, i, j, k, l] => sql.exec12(q, a, b, c, d, e, f, g, h, i, j, k, l),
        _ => return None,
    })
}

impl SyncSql for DoSql {
    fn exec(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        Ok(self.exec_counted(sql, params)?.0)
    }

    /// The cursor's own counts, read once it is consumed (what Durable
    /// Object storage bills). Parameters go over as JavaScript values at
    /// once (`js_param`): no copy of each string, no safe-integer check per
    /// number, which a journal write paid a dozen times.
    fn exec_counted(&self, sql: &str, params: &[Param]) -> Result<(Vec<Row>, Usage), StoreError> {
        let bound: Vec<JsValue> = params.iter().map(js_param).collect();
        let storage: &JsValue = self.0.as_ref();
        let cursor = match exec_fixed(storage.unchecked_ref(), sql, &bound) {
            Some(ran) => ran,
            None => storage
                .unchecked_ref::<SqlStorageSys>()
                .exec(sql, bound.into_iter().collect()),
        }
        .map_err(|e| StoreError::Query(js_err(e)))?;
        // A statement without a result (a write with no RETURNING) has run
        // to its end inside `exec`: there is nothing to read back.
        let rows = match crate::store::sql::returns_rows(sql) {
            true => cursor_rows(&cursor)?,
            false => Vec::new(),
        };
        let usage = Usage {
            rows_read: cursor.rows_read() as u64,
            rows_written: cursor.rows_written() as u64,
        };
        Ok((rows, usage))
    }
}

/// A cursor's rows, each decoded as `worker`'s `SqlCursor::to_array` does.
fn cursor_rows(cursor: &SqlStorageCursor) -> Result<Vec<Row>, StoreError> {
    let values = cursor
        .to_array()
        .iter()
        .map(serde_wasm_bindgen::from_value::<Value>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Decode(e.to_string()))?;
    Ok(to_rows(values))
}

// --- fetch ---

pub struct FetchTransport;

/// An outgoing request as the Workers runtime takes it.
pub fn worker_request(req: HttpRequest) -> Result<Request, String> {
    let headers = Headers::new();
    for (k, v) in &req.headers {
        headers.set(k, v).map_err(|e| e.to_string())?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::from(req.method.to_owned()))
        .with_headers(headers);
    if let Some(body) = req.body {
        init.with_body(Some(JsValue::from_str(&body)));
    }
    Request::new_with_init(&req.url, &init).map_err(|e| e.to_string())
}

#[async_trait(?Send)]
impl Transport for FetchTransport {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        let request = worker_request(req)?;
        let mut resp = Fetch::Request(request)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let body = resp.text().await.map_err(|e| e.to_string())?;
        Ok(HttpResponse { status, body })
    }
}

// --- WebCrypto RS256 ---

pub struct WebCryptoSigner;

/// A JavaScript error's message (without its stack), for an error text.
pub(crate) fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| {
            e.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{e:?}"))
}

#[async_trait(?Send)]
impl Rs256Signer for WebCryptoSigner {
    async fn sign(&self, pkcs8_der: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
        let crypto: web_sys::Crypto = Reflect::get(&js_sys::global(), &JsValue::from_str("crypto"))
            .map_err(js_err)?
            .dyn_into()
            .map_err(|_| "no WebCrypto in this runtime".to_owned())?;
        let subtle = crypto.subtle();
        let algorithm = Object::new();
        let hash = Object::new();
        Reflect::set(&hash, &"name".into(), &"SHA-256".into()).map_err(js_err)?;
        Reflect::set(&algorithm, &"name".into(), &"RSASSA-PKCS1-v1_5".into()).map_err(js_err)?;
        Reflect::set(&algorithm, &"hash".into(), &hash).map_err(js_err)?;
        let key_data = Uint8Array::from(pkcs8_der).buffer();
        let usages = Array::of1(&JsValue::from_str("sign"));
        let key = JsFuture::from(
            subtle
                .import_key_with_object("pkcs8", &key_data, &algorithm, false, &usages)
                .map_err(js_err)?,
        )
        .await
        .map_err(js_err)?;
        let key: web_sys::CryptoKey = key
            .dyn_into()
            .map_err(|_| "importKey returned no key".to_owned())?;
        let sig = JsFuture::from(
            subtle
                .sign_with_object_and_u8_array(&algorithm, &key, data)
                .map_err(js_err)?,
        )
        .await
        .map_err(js_err)?;
        Ok(Uint8Array::new(&sig).to_vec())
    }
}

// --- R2 ---

pub struct R2(pub worker::Bucket);

#[async_trait(?Send)]
impl Blobs for R2 {
    async fn put_text(&self, key: &str, text: &str) -> Result<(), String> {
        self.0
            .put(key, text.as_bytes().to_vec())
            .execute()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn get_text(&self, key: &str) -> Result<Option<String>, String> {
        let Some(obj) = self.0.get(key).execute().await.map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let Some(body) = obj.body() else {
            return Ok(None);
        };
        body.text().await.map(Some).map_err(|e| e.to_string())
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<String>, String> {
        let objects = self
            .0
            .list()
            .prefix(prefix)
            .limit(limit)
            .execute()
            .await
            .map_err(|e| e.to_string())?;
        let mut keys: Vec<String> = objects.objects().iter().map(|o| o.key()).collect();
        keys.sort();
        Ok(keys)
    }

    async fn delete(&self, key: &str) -> Result<(), String> {
        self.0.delete(key).await.map_err(|e| e.to_string())
    }
}

// --- RS256 JWTs (Cloudflare Access, GitHub OIDC): verification and the issuer's keys ---

/// RS256 verification with WebCrypto: the JWK imported as published.
pub struct WebCryptoVerifier;

fn subtle() -> Result<web_sys::SubtleCrypto, String> {
    let crypto: web_sys::Crypto = Reflect::get(&js_sys::global(), &JsValue::from_str("crypto"))
        .map_err(js_err)?
        .dyn_into()
        .map_err(|_| "no WebCrypto in this runtime".to_owned())?;
    Ok(crypto.subtle())
}

fn rs256_algorithm() -> Result<Object, String> {
    let algorithm = Object::new();
    let hash = Object::new();
    Reflect::set(&hash, &"name".into(), &"SHA-256".into()).map_err(js_err)?;
    Reflect::set(&algorithm, &"name".into(), &"RSASSA-PKCS1-v1_5".into()).map_err(js_err)?;
    Reflect::set(&algorithm, &"hash".into(), &hash).map_err(js_err)?;
    Ok(algorithm)
}

#[async_trait(?Send)]
impl crate::http::jwt::Rs256Verify for WebCryptoVerifier {
    async fn verify(
        &self,
        jwk: &crate::http::jwt::Jwk,
        signing_input: &[u8],
        signature: &[u8],
    ) -> Result<bool, String> {
        let subtle = subtle()?;
        let algorithm = rs256_algorithm()?;
        let key_data = Object::new();
        for (k, v) in [
            ("kty", "RSA"),
            ("alg", "RS256"),
            ("n", &jwk.n),
            ("e", &jwk.e),
        ] {
            Reflect::set(&key_data, &k.into(), &v.into()).map_err(js_err)?;
        }
        let usages = Array::of1(&JsValue::from_str("verify"));
        let key = JsFuture::from(
            subtle
                .import_key_with_object("jwk", &key_data, &algorithm, false, &usages)
                .map_err(js_err)?,
        )
        .await
        .map_err(js_err)?;
        let key: web_sys::CryptoKey = key
            .dyn_into()
            .map_err(|_| "importKey returned no key".to_owned())?;
        let valid = JsFuture::from(
            subtle
                .verify_with_object_and_u8_array_and_u8_array(
                    &algorithm,
                    &key,
                    signature,
                    signing_input,
                )
                .map_err(js_err)?,
        )
        .await
        .map_err(js_err)?;
        Ok(valid.as_bool().unwrap_or(false))
    }
}

/// An issuer's JWKS (Access's certs, GitHub's OIDC keys): both answer in
/// milliseconds; past this the request is answered 503 (the cache serves
/// known keys meanwhile).
const JWKS_FETCH_TIMEOUT_MS: u64 = 5_000;

/// Fetches the JWKS with a bound.
pub struct FetchJwks;

#[async_trait(?Send)]
impl crate::http::jwt::JwksFetch for FetchJwks {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let request = Request::new(url, Method::Get).map_err(|e| e.to_string())?;
        let get = async {
            let mut resp = Fetch::Request(request)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if resp.status_code() != 200 {
                return Err(format!("the keys URL answered {}", resp.status_code()));
            }
            resp.bytes().await.map_err(|e| e.to_string())
        };
        let timeout = Delay::from(Duration::from_millis(JWKS_FETCH_TIMEOUT_MS));
        match futures_util::future::select(Box::pin(get), timeout).await {
            futures_util::future::Either::Left((r, _)) => r,
            futures_util::future::Either::Right(_) => Err(format!(
                "no answer from {url} within {JWKS_FETCH_TIMEOUT_MS} ms"
            )),
        }
    }
}

// --- logs ---

/// Structured log lines (`crate::obs`) to the console, which Workers Logs
/// indexes, each at the console level its `level` field names: an info
/// line is `console.info`, so Workers Logs' own level filter agrees with
/// the line (and `wrangler dev` prints it without source-mapping it).
pub struct ConsoleLog;

impl crate::obs::LogSink for ConsoleLog {
    fn write(&self, level: crate::obs::Level, line: &str) {
        let line = wasm_bindgen::JsValue::from_str(line);
        match level {
            crate::obs::Level::Info => worker::web_sys::console::info_1(&line),
            crate::obs::Level::Warn => worker::web_sys::console::warn_1(&line),
            crate::obs::Level::Error => worker::web_sys::console::error_1(&line),
        }
    }
}
