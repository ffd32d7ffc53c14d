//! The OpenAPI document against the real router, its examples and real responses.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::setup;

/// The generated document, as the daemon serves it.
pub fn openapi() -> Value {
    serde_json::from_str(gavel::server::openapi()).expect("the OpenAPI document is JSON")
}

/// Problems of `instance` against `schema`, a schema of the document (its `$ref`s resolve in
/// the document's components).
pub fn schema_errors(doc: &Value, schema: &Value, instance: &Value) -> Vec<String> {
    let root = json!({"components": doc["components"], "allOf": [schema]});
    let validator = jsonschema::validator_for(&root).expect("a valid JSON schema");
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

pub fn assert_matches(doc: &Value, schema: &Value, instance: &Value, what: &str) {
    let errors = schema_errors(doc, schema, instance);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{instance:#}");
}

pub fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Every `(METHOD, path)` the document describes.
fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert((method.to_uppercase(), path.clone()));
        }
    }
    out
}

#[tokio::test]
async fn openapi_documents_exactly_the_routes_the_daemon_serves() {
    let doc = openapi();
    assert_eq!(doc["openapi"], "3.1.0");
    let documented = documented_routes(&doc);
    let served: BTreeSet<(String, String)> = gavel::server::route_list()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from the OpenAPI document: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "the OpenAPI document has routes that are not served: {unserved:?}"
    );

    let (_mock, gavel, _dir) = setup().await;
    let client = reqwest::Client::new();
    // Each documented route is really routed (a body-less request may be refused, never 404/405).
    for (method, path) in &documented {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let status = client
            .request(m, format!("{}{path}", gavel.url))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert!(status != 404 && status != 405, "{method} {path}: {status}");
    }
    // The served document is the generated one, byte for byte.
    let resp = reqwest::get(format!("{}/openapi.json", gavel.url))
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.text().await.unwrap(), gavel::server::openapi());
}

#[tokio::test]
async fn openapi_examples_validate_are_accepted_and_responses_match_the_schemas() {
    let doc = openapi();
    let (_mock, gavel, _dir) = setup().await;
    let mut examples_run = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{} {path}", method.to_uppercase());
            let ok = &op["responses"]["200"]["content"]["application/json"]["schema"];
            if let Some(body) = op.get("requestBody") {
                let media = &body["content"]["application/json"];
                let examples = media["examples"]
                    .as_object()
                    .unwrap_or_else(|| panic!("{what}: no request examples"));
                assert!(!examples.is_empty(), "{what}: no request examples");
                for (name, example) in examples {
                    let value = &example["value"];
                    assert_matches(
                        &doc,
                        &media["schema"],
                        value,
                        &format!("{what} example {name}"),
                    );
                    assert_eq!(method, "post", "{what}: bodies are only POSTed");
                    let (status, resp) = gavel.post(path, value).await;
                    assert_eq!(status, 200, "{what} example {name}: {resp}");
                    assert_matches(&doc, ok, &resp, &format!("{what} response to {name}"));
                    examples_run += 1;
                }
            } else if !ok.is_null() {
                let (status, resp) = gavel.get(path).await;
                assert_eq!(status, 200, "{what}: {resp}");
                assert_matches(&doc, ok, &resp, &format!("{what} response"));
            }
        }
    }
    assert!(examples_run >= 5, "only {examples_run} examples");

    // The schemas are not vacuous: bodies the daemon refuses fail them too, and the refusals
    // match the error schema.
    let traj = json!({"messages": [{"role": "user", "content": "q"}]});
    for bad in [
        json!({"trajectories": "none"}),
        json!({"trajectories": []}),
        json!({"trajectories": [traj], "judges": "x"}),
        json!({"trajectories": [{"messages": [{"role": "robot", "content": "q"}]}]}),
        json!({"trajectories": [traj], "on_judge_error": "zero"}),
    ] {
        assert!(
            !schema_errors(&doc, &schema_ref("ScoreRequest"), &bad).is_empty(),
            "the schema accepts {bad}"
        );
        let (status, resp) = gavel.post("/v1/score_group", &bad).await;
        assert_eq!(status, 400, "{bad}: {resp}");
        assert_matches(&doc, &schema_ref("Error"), &resp, "a 400");
    }
    let (status, resp) = gavel.get("/no/such/route").await;
    assert_eq!(status, 404);
    assert_matches(&doc, &schema_ref("Error"), &resp, "a 404");
}

/// The JSON pointers at which `a` and `b` differ (a field present in one only, or a different
/// value), field by field.
fn differences(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => differences(u, v, here, out),
                    _ => out.push(here),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                differences(u, v, format!("{at}/{i}"), out);
            }
        }
        _ if a != b => out.push(at),
        _ => {}
    }
}

/// The document is the recorded one (`tests/data/openapi.json`: as the daemon served it before
/// the module reorganisation, but for the source folder `info.description` names), field by
/// field and in order: a refactor changes no part of the API. A
/// deliberate API change re-records it: `GAVEL_OPENAPI_SNAPSHOT=update cargo test --test ops`.
#[test]
fn openapi_is_the_recorded_document() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/openapi.json");
    let doc = openapi();
    if std::env::var("GAVEL_OPENAPI_SNAPSHOT").as_deref() == Ok("update") {
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
        return;
    }
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut changed = Vec::new();
    differences(&recorded, &doc, String::new(), &mut changed);
    assert!(
        changed.is_empty(),
        "the OpenAPI document differs at {changed:#?}"
    );
    // Object key order too (the document is served as written).
    assert_eq!(
        serde_json::to_string(&recorded).unwrap(),
        serde_json::to_string(&doc).unwrap()
    );
}
