//! Random request bodies (proptest): mutations of valid groups — values of the wrong type,
//! deep nesting, unicode, missing and unknown fields, oversized lists — never panic the daemon;
//! every answer is either a valid response or a typed error.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{json, Map, Value};

use crate::common::{marked_group, simple_traj, Gavel, MockJudge};

/// Any JSON value, up to three levels deep, with the numbers and strings that break parsers.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON has no NaN", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(u64::MAX)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        "\\PC{0,40}".prop_map(Value::String),
        Just(json!("")),
        Just(json!("user")),
        Just(json!("assistant")),
        Just(json!("\u{0000}\u{202e}\u{fffd}")),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid group with most optional fields set, the starting point of every mutation.
fn seed_group() -> Value {
    let mut g = marked_group(&[0.2, 0.8, 0.5]);
    g["trajectories"][1]["messages"][2]["tool_calls"] = json!([
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}]);
    g["trajectories"]
        .as_array_mut()
        .unwrap()
        .push(json!({"messages": [{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": [{"type": "text", "text": "yo"}]}],
                     "reward": 0.5}));
    g["rubric"] = json!({"text": "Be right.", "items": [{"id": "a", "text": "Correct."}]});
    g["verifiers"] = json!([{"type": "answer_line", "expected": "4000"}]);
    g["permutations"] = json!(2);
    g["policy"] = json!({"type": "weighted", "weights": {"judge": 1.0}});
    g["on_judge_error"] = json!("null");
    g["reference"] = json!("4120");
    g
}

/// Every node of `v` in preorder, as paths of object keys and array indices.
fn paths(v: &Value, here: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                here.push(json!(k));
                paths(x, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                here.push(json!(i));
                paths(x, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, step| match step {
        Value::String(k) => &mut v[k.as_str()],
        _ => &mut v[step.as_u64().unwrap() as usize],
    })
}

/// Applies one mutation to the node number `at` (modulo the node count): replace it, remove it
/// from its parent, wrap it 40 levels deep, or repeat it 100 times in a list.
fn mutate(v: &mut Value, at: usize, op: u8, with: Value) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = &all[at % all.len()];
    match op % 4 {
        0 => *node(v, path) = with,
        1 if !path.is_empty() => {
            let (last, parent) = path.split_last().unwrap();
            match (node(v, parent), last) {
                (Value::Object(m), Value::String(k)) => {
                    m.remove(k);
                }
                (Value::Array(a), i) => {
                    a.remove(i.as_u64().unwrap() as usize);
                }
                _ => {}
            }
        }
        2 => {
            let target = node(v, path);
            let mut deep = target.take();
            for _ in 0..40 {
                deep = json!([deep]);
            }
            *target = deep;
        }
        _ => {
            let target = node(v, path);
            *target = Value::Array(vec![target.take(); 100]);
        }
    }
}

/// A typed answer: a score response for a group, or `{"error": {"type", "message"}}` with a
/// 4xx (or a judge's 502/503/504, which is the judge's typed error, not the daemon's).
fn check_answer(route: &str, status: u16, body: &Value) -> Result<(), TestCaseError> {
    if status == 200 {
        let ok = match route {
            "/v1/render" => body["messages"].is_array(),
            _ => body["rewards"].is_array(),
        };
        prop_assert!(ok, "200 without a response: {}", body);
        return Ok(());
    }
    let typed = body["error"]["type"].is_string() && body["error"]["message"].is_string();
    prop_assert!(typed, "untyped {} answer: {}", status, body);
    let kind = body["error"]["type"].as_str().unwrap_or_default();
    let judge = matches!(status, 502..=504) && kind.starts_with("judge_");
    prop_assert!(
        (400..500).contains(&status) || judge,
        "{} {} for a client's body: {}",
        status,
        kind,
        body
    );
    Ok(())
}

/// A runtime, and the daemon over a fresh store with the mock as its judge, for sync
/// proptest runners.
fn daemon() -> (tokio::runtime::Runtime, tempfile::TempDir, MockJudge, Gavel) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mock, gavel) = rt.block_on(async {
        let mock = MockJudge::start().await;
        let gavel = Gavel::start(mock.config(&dir.path().join("store"))).await;
        (mock, gavel)
    });
    (rt, dir, mock, gavel)
}

#[test]
fn mutated_groups_get_a_response_or_a_typed_4xx_never_a_panic() {
    let (rt, _dir, _mock, gavel) = daemon();
    let client = reqwest::Client::new();
    let seed = seed_group();
    // The seed itself is valid, so mutations start from deep inside the pipeline.
    let (status, answer) = rt.block_on(gavel.post("/v1/score_group", &seed));
    assert_eq!(status, 200, "{answer}");
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 300,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let mutations = prop::collection::vec((any::<usize>(), any::<u8>(), arb_json()), 1..4);
    runner
        .run(&(mutations, any::<bool>()), |(ops, render)| {
            let mut body = seed.clone();
            for (at, op, with) in ops {
                mutate(&mut body, at, op, with);
            }
            let route = if render {
                "/v1/render"
            } else {
                "/v1/score_group"
            };
            let (status, answer) = rt.block_on(async {
                let resp = client
                    .post(format!("{}{route}", gavel.url))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                (status, resp.json::<Value>().await.unwrap_or(Value::Null))
            });
            check_answer(route, status, &answer)
        })
        .unwrap();
    // Still serving, and scoring.
    rt.block_on(async {
        let group =
            json!({"trajectories": [simple_traj("SCORE=0.1 a"), simple_traj("SCORE=0.9 b")]});
        assert_eq!(gavel.post("/v1/score_group", &group).await.0, 200);
        gavel.stop().await;
    });
}

#[test]
fn arbitrary_bytes_get_a_typed_400() {
    let (rt, _dir, _mock, gavel) = daemon();
    let valid = serde_json::to_vec(&seed_group()).unwrap();
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 200,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    // A valid body cut short, or with bytes overwritten: invalid JSON or invalid UTF-8.
    let edits = (
        0..valid.len(),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    );
    runner
        .run(&edits, |(cut, flips)| {
            let mut bytes = valid[..cut].to_vec();
            for (at, b) in flips {
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] = b;
                }
            }
            let (status, answer) = rt.block_on(gavel.post_raw("/v1/score_group", bytes));
            check_answer("/v1/score_group", status, &answer)
        })
        .unwrap();
    rt.block_on(gavel.stop());
}
