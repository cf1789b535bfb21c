//! `docs/openapi.json` is the contract of the `/v1/` API: every route the
//! router serves outside the dashboard is documented with its method, every
//! documented operation is served, each list documents exactly the query
//! parameters it accepts (and its page cap), every example is valid against
//! its schema, and the schemas of rows are the Rust types' own fields.

use std::collections::BTreeSet;

use serde_json::Value;
use sluice::engine::CreateRequest;
use sluice::http::lists;
use sluice::http::routes::{route, ROUTES};
use sluice::http::{dispatch, oidc};
use sluice::limits::{EXECUTIONS_LISTED_MAX, GROUPS_LISTED_MAX, STEPS_LISTED_MAX};
use sluice::store::executions::{DeliveryRow, ExecutionRow, StepRow};

const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

fn doc() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
        .expect("docs/openapi.json is readable");
    serde_json::from_str(&text).expect("docs/openapi.json is JSON")
}

/// A sample path for a template, as the router's own test writes them.
fn sample(template: &str) -> String {
    template
        .replace("{id}", "check-a-1")
        .replace("{type}", "deploy-confirm")
        .replace("{group}", "deploy%3Ao%2Fr%3Amain")
        .replace("{step_key}", "run-check-command")
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            if item.get(*m).is_some() {
                out.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

#[test]
fn every_route_is_documented_and_every_documented_route_is_served() {
    let doc = doc();
    assert_eq!(doc["openapi"], "3.1.0");
    let api: BTreeSet<(String, String)> = ROUTES
        .iter()
        .filter(|(_, p)| !p.starts_with("/ui"))
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    let documented = documented(&doc);
    let undocumented: Vec<_> = api.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served, not documented: {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&api).collect();
    assert!(
        unserved.is_empty(),
        "documented, not in ROUTES: {unserved:?}"
    );
    for (method, path) in &documented {
        assert!(
            route(method, &sample(path)).is_ok(),
            "{method} {path} is not served"
        );
    }
    // A path template's parameters are all declared, and only those.
    for (path, item) in doc["paths"].as_object().unwrap() {
        let in_path: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        for m in METHODS {
            let Some(op) = item.get(*m) else { continue };
            assert!(
                op["operationId"].is_string(),
                "{m} {path} has no operationId"
            );
            let declared: BTreeSet<&str> = params(op, "path").into_iter().collect();
            assert_eq!(declared, in_path, "{m} {path}: path parameters");
        }
    }
}

fn params<'a>(op: &'a Value, location: &str) -> Vec<&'a str> {
    op["parameters"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["in"] == location)
                .filter_map(|p| p["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

fn query_param<'a>(op: &'a Value, name: &str) -> &'a Value {
    op["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["in"] == "query" && p["name"] == name))
        .unwrap_or(&Value::Null)
}

#[test]
fn each_list_documents_exactly_the_parameters_it_accepts_and_its_cap() {
    let doc = doc();
    let lists: [(&str, &[&str], &str, u32); 5] = [
        (
            "/v1/executions",
            lists::EXECUTIONS_PARAMS,
            "limit",
            EXECUTIONS_LISTED_MAX,
        ),
        (
            "/v1/executions/{id}",
            lists::EXECUTION_PARAMS,
            "steps_limit",
            STEPS_LISTED_MAX,
        ),
        (
            "/v1/deliveries",
            lists::DELIVERIES_PARAMS,
            "limit",
            lists::DELIVERIES_LISTED_MAX,
        ),
        (
            "/v1/groups",
            lists::GROUPS_PARAMS,
            "limit",
            GROUPS_LISTED_MAX,
        ),
        (
            "/v1/costs",
            lists::COSTS_PARAMS,
            "limit",
            lists::COSTS_REPOS_LISTED_MAX,
        ),
    ];
    for (path, accepted, limit, max) in lists {
        let op = &doc["paths"][path]["get"];
        let mut documented = params(op, "query");
        documented.sort_unstable();
        let mut accepted = accepted.to_vec();
        accepted.sort_unstable();
        assert_eq!(documented, accepted, "GET {path}: query parameters");
        let schema = &query_param(op, limit)["schema"];
        assert_eq!(schema["maximum"], max, "GET {path}: {limit} maximum");
    }
    // A signed link (a log's, an archive's) takes exactly its signature
    // (`runs::loglink`).
    const SIGNED: [&str; 2] = ["/logs/{id}/{step_key}", "/artifacts/{id}"];
    for path in SIGNED {
        let link = &doc["paths"][path]["get"];
        assert_eq!(params(link, "query"), ["exp", "sig"], "{path}");
    }
    // Other operations without a list document no query.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(*m) else { continue };
            let is_list = lists.iter().any(|(p, ..)| p == path) && *m == "get";
            if !is_list && !SIGNED.contains(&path.as_str()) {
                assert!(params(op, "query").is_empty(), "{m} {path} takes no query");
            }
        }
    }
}

/// `POST /v1/dispatch` documents exactly the headers the Worker reads: the
/// signature and its timestamp (required) and the OIDC token (optional),
/// and the 403 a token whose claims do not match is answered with.
#[test]
fn dispatch_documents_the_headers_it_reads() {
    let doc = doc();
    let op = &doc["paths"]["/v1/dispatch"]["post"];
    let headers: BTreeSet<(&str, bool)> = op["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|p| p["in"] == "header")
        .map(|p| (p["name"].as_str().unwrap_or(""), p["required"] == true))
        .collect();
    let read: BTreeSet<(&str, bool)> = [
        (dispatch::TIMESTAMP_HEADER, true),
        (dispatch::SIGNATURE_HEADER, true),
        (oidc::OIDC_TOKEN_HEADER, false),
    ]
    .into_iter()
    .collect();
    assert_eq!(headers, read);
    let forbidden = resolve(&doc, &op["responses"]["403"]);
    let example = &forbidden["content"]["application/json"]["example"]["error"];
    assert_eq!(example["code"], "oidc_required");
    let description = op["description"].as_str().unwrap_or("");
    for needed in [
        "X-Sluice-OIDC-Token",
        "`**`",
        "dispatch_oidc",
        "oidc_environment",
        "refs/heads/<branch>",
    ] {
        assert!(
            description.contains(needed),
            "the description says {needed}"
        );
    }
}

/// Every example (request and response bodies, shared responses) against
/// its schema.
#[test]
fn every_example_is_valid_against_its_schema() {
    let doc = doc();
    let mut checked = 0;
    let mut contents = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(*m) else { continue };
            if let Some(c) = op["requestBody"]["content"].as_object() {
                contents.push((format!("{m} {path} request"), c));
            }
            for (code, resp) in op["responses"].as_object().expect("responses") {
                let resp = resolve(&doc, resp);
                if let Some(c) = resp["content"].as_object() {
                    contents.push((format!("{m} {path} {code}"), c));
                }
            }
        }
    }
    for (what, content) in contents {
        for (media, body) in content {
            assert!(
                ["application/json", "text/plain", "application/gzip"].contains(&media.as_str()),
                "{what}: {media}"
            );
            if let Some(example) = body.get("example") {
                if let Err(e) = validate(&doc, &body["schema"], example, "$") {
                    panic!("{what}: {e}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} examples checked");
    // The validator refuses what it should (so the check above can fail).
    let exec = &doc["components"]["schemas"]["Execution"];
    let mut bad = doc["paths"]["/v1/executions/{id}"]["get"]["responses"]["200"]["content"]
        ["application/json"]["example"]["execution"]
        .clone();
    bad["status"] = "exploded".into();
    assert!(validate(&doc, exec, &bad, "$").is_err());
    bad["status"] = "complete".into();
    bad["unknown"] = 1.into();
    assert!(validate(&doc, exec, &bad, "$").is_err());
}

/// The row schemas name exactly the fields the Rust types serialize, and
/// their examples deserialize into those types.
#[test]
fn row_schemas_are_the_rust_types() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let example = |path: &str, pointer: &str| -> Value {
        doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["example"]
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{path} example has {pointer}"))
            .clone()
    };
    let execution = example("/v1/executions/{id}", "/execution");
    let row: ExecutionRow = serde_json::from_value(execution).expect("an ExecutionRow");
    same_fields(
        &schemas["Execution"],
        &serde_json::to_value(row).unwrap(),
        "Execution",
    );
    let step = example("/v1/executions/{id}", "/steps/0");
    let row: StepRow = serde_json::from_value(step).expect("a StepRow");
    same_fields(
        &schemas["Step"],
        &serde_json::to_value(row).unwrap(),
        "Step",
    );
    let costs = example("/v1/executions/{id}", "/costs/units");
    let units: sluice::cost::CostUnits = serde_json::from_value(costs).expect("CostUnits");
    same_fields(
        &schemas["CostUnits"],
        &serde_json::to_value(units).unwrap(),
        "CostUnits",
    );
    let delivery = example("/v1/deliveries", "/deliveries/0");
    let row: DeliveryRow = serde_json::from_value(delivery).expect("a DeliveryRow");
    same_fields(
        &schemas["Delivery"],
        &serde_json::to_value(row).unwrap(),
        "Delivery",
    );
    let create = doc["paths"]["/v1/executions"]["post"]["requestBody"]["content"]
        ["application/json"]["example"]
        .clone();
    let req: CreateRequest = serde_json::from_value(create).expect("a CreateRequest");
    same_fields(
        &schemas["CreateRequest"],
        &serde_json::to_value(req).unwrap(),
        "CreateRequest",
    );
}

fn same_fields(schema: &Value, value: &Value, name: &str) {
    let documented: BTreeSet<&String> = schema["properties"].as_object().unwrap().keys().collect();
    let actual: BTreeSet<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(
        documented, actual,
        "{name}: schema properties vs the type's fields"
    );
}

fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            resolve(
                doc,
                doc.pointer(pointer).unwrap_or_else(|| panic!("{r} exists")),
            )
        }
        None => v,
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        other => panic!("unknown type {other}"),
    }
}

/// The subset of JSON Schema the document uses: `$ref`, `type` (one or a
/// list), `enum`, `oneOf`, `required`, `properties`,
/// `additionalProperties: false`, `items`, `maxItems`, `minimum`, `maximum`.
fn validate(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let s = resolve(doc, schema);
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => return Err(format!("{at}: bad type {t}")),
        };
        if !types.iter().any(|t| type_matches(t, v)) {
            return Err(format!("{at}: {v} is not {types:?}"));
        }
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            return Err(format!("{at}: {v} is not one of {options:?}"));
        }
    }
    if let Some(options) = s.get("oneOf").and_then(Value::as_array) {
        let passing = options
            .iter()
            .filter(|o| validate(doc, o, v, at).is_ok())
            .count();
        if passing != 1 {
            return Err(format!("{at}: {passing} of oneOf match {v}"));
        }
    }
    if let Some(n) = v.as_f64() {
        if s.get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n < m)
        {
            return Err(format!("{at}: {n} is below the minimum"));
        }
        if s.get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n > m)
        {
            return Err(format!("{at}: {n} is above the maximum"));
        }
    }
    if let Some(items) = v.as_array() {
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| items.len() as u64 > m)
        {
            return Err(format!("{at}: more than maxItems"));
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(doc, item_schema, item, &format!("{at}[{i}]"))?;
            }
        }
    }
    if let Some(obj) = v.as_object() {
        validate_object(doc, s, obj, at)?;
    }
    Ok(())
}

fn validate_object(
    doc: &Value,
    s: &Value,
    obj: &serde_json::Map<String, Value>,
    at: &str,
) -> Result<(), String> {
    for key in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = key.as_str().unwrap_or_default();
        if !obj.contains_key(key) {
            return Err(format!("{at}: {key} is required"));
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    for (key, value) in obj {
        match props.and_then(|p| p.get(key)) {
            Some(p) => validate(doc, p, value, &format!("{at}.{key}"))?,
            None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return Err(format!("{at}: {key} is not a documented property"));
            }
            None => {}
        }
    }
    Ok(())
}
