//! Verifiable rewards, checklist rubrics, reward policies and advantages over real HTTP.

mod common;

use common::{close, floats, setup, simple_traj, Behaviour, Gavel};
use serde_json::{json, Value};

fn example(name: &str) -> Value {
    let path = format!("{}/examples/groups/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Four arithmetic answers: right, wrong, unparseable, missing.
fn answers_group() -> Value {
    json!({"trajectories": [
        simple_traj("1030 * 4 = 4120. SCORE=0.6\nANSWER: 4,120"),
        simple_traj("SCORE=0.9 I believe\nANSWER: 4100"),
        simple_traj("SCORE=0.3\nANSWER: about four thousand"),
        simple_traj("SCORE=0.8 It is 4120."),
    ]})
}

#[tokio::test]
async fn verifier_only_requests_never_call_a_judge_even_without_one() {
    // No judge configured at all: a verifier-only policy still scores.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = gavel::config::Config::from_env(&|_| None).expect("no variables, no error");
    cfg.store.path = dir.path().join("store");
    let gavel = Gavel::start(cfg).await;
    let mut body = answers_group();
    body["verifiers"] = json!([{"type": "answer_line", "kind": "integer", "expected": 4120}]);
    body["policy"] = json!({"type": "weighted", "weights": {"answer_line": 1.0}});
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(floats(&r["rewards"]), vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(r["judges"], json!([]));
    assert_eq!(r["usage"]["judge_calls"], 0);
    assert!(r["scores"][0]["components"].get("judge").is_none());
    assert_eq!(r["scores"][0]["reasons"]["answer_line"], "correct");
    assert!(r["scores"][1]["reasons"]["answer_line"]
        .as_str()
        .unwrap()
        .starts_with("wrong"));
    assert!(r["scores"][2]["reasons"]["answer_line"]
        .as_str()
        .unwrap()
        .starts_with("unparseable"));
    assert!(r["scores"][3]["reasons"]["answer_line"]
        .as_str()
        .unwrap()
        .starts_with("missing"));
    // GRPO advantages over [1, 0, 0, 0].
    let std = (0.75f64 / 3.0).sqrt() + 1e-4;
    assert!(close(
        &floats(&r["advantages"]),
        &[0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std]
    ));
}

#[tokio::test]
async fn weighted_policy_merges_judge_verifiers_and_reports_zero_weight_components() {
    let (mock, gavel, _dir) = setup().await;
    let mut body = answers_group();
    body["verifiers"] = json!([
        {"type": "answer_line", "kind": "integer", "expected": 4120},
        {"type": "contains", "text": "4120"},
        {"type": "turn_budget", "budget": 1, "limit": 3}]);
    body["policy"] =
        json!({"type": "weighted", "weights": {"judge": 1.0, "answer_line": 2.0, "contains": 0.0}});
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(mock.calls(), 1);
    // reward = (judge + 2·answer_line) / 3; contains and turn_budget are reported, not counted.
    assert!(
        close(
            &floats(&r["rewards"]),
            &[(0.6 + 2.0) / 3.0, 0.9 / 3.0, 0.3 / 3.0, 0.8 / 3.0]
        ),
        "{}",
        r["rewards"]
    );
    let c = &r["scores"][3]["components"];
    assert_eq!(c["contains"], 1.0);
    assert_eq!(c["turn_budget"], 1.0);
    assert_eq!(c["judge"], 0.8);
    assert_eq!(r["scores"][0]["score"], r["rewards"][0]);
}

#[tokio::test]
async fn not_applicable_components_are_left_out_not_counted_as_zero() {
    let (_mock, gavel, _dir) = setup().await;
    // The caller's reward is given for trajectory 1 only; for the others it is not applicable.
    let mut body =
        json!({"trajectories": [simple_traj("SCORE=0.2 a"), simple_traj("SCORE=0.6 b")]});
    body["trajectories"][0]["reward"] = json!(1.0);
    body["policy"] =
        json!({"type": "weighted", "weights": {"judge": 1.0, "independent_reward": 1.0}});
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    assert!(
        close(&floats(&r["rewards"]), &[0.6, 0.6]),
        "{}",
        r["rewards"]
    );
    assert_eq!(r["scores"][0]["components"]["independent_reward"], 1.0);
    assert!(r["scores"][1]["components"]
        .get("independent_reward")
        .is_none());
}

#[tokio::test]
async fn gate_policy_floors_a_failed_check() {
    let (_mock, gavel, _dir) = setup().await;
    let mut body = answers_group();
    body["verifiers"] = json!([{"type": "answer_line", "kind": "integer", "expected": 4120}]);
    body["policy"] =
        json!({"type": "gate", "gate": "answer_line", "floor": 0.05, "weights": {"judge": 1.0}});
    let (_, r) = gavel.post("/v1/score_group", &body).await;
    assert!(
        close(&floats(&r["rewards"]), &[0.6, 0.05, 0.05, 0.05]),
        "{}",
        r["rewards"]
    );
}

#[tokio::test]
async fn retrieval_qa_rubric_ranks_every_right_answer_above_every_wrong_one() {
    let (mock, gavel, _dir) = setup().await;
    // The judge prefers the wrong answers strongly; correctness must still dominate.
    let mut body = example("retrieval_qa");
    let judge_scores = [0.1, 1.0, 1.0, 0.0];
    mock.push(Behaviour::Content(
        json!({"scores": judge_scores.iter().enumerate().map(|(i, s)| json!({"trajectory_id": (i + 1).to_string(), "explanation": "", "score": s})).collect::<Vec<_>>()}).to_string(),
    ));
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    let rewards = floats(&r["rewards"]);
    // Trajectories 1 and 4 answer 12245525 (right); 2 and 3 are wrong.
    assert_eq!(r["scores"][0]["components"]["answer_line"], 1.0);
    assert_eq!(r["scores"][3]["components"]["answer_line"], 1.0);
    assert_eq!(r["scores"][1]["components"]["answer_line"], 0.0);
    assert!(
        rewards[0].min(rewards[3]) > rewards[1].max(rewards[2]),
        "{rewards:?}"
    );
    // Within the right tier, shaping ranks: 1 used fewer turns and the judge preferred it.
    assert!(rewards[0] > rewards[3], "{rewards:?}");
    let s = 0.15f64;
    let turn_1 = r["scores"][0]["components"]["turn_budget"]
        .as_f64()
        .unwrap();
    let want = (1.0 + s * (0.1 * 0.1 + 0.05 * turn_1) / s) / (1.0 + s);
    assert!((rewards[0] - want).abs() < 1e-9, "{} vs {want}", rewards[0]);
    // A policy-only change reuses the cached verdict.
    body["policy"] = json!({"type": "weighted", "weights": {"judge": 1.0, "answer_line": 1.0}});
    let (_, again) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(again["usage"]["cache_hits"], 1);
    assert_eq!(mock.calls(), 1);
    assert_ne!(again["rubric"]["version"], Value::Null);
}

#[tokio::test]
async fn checklist_rubric_scores_the_weighted_fraction_with_a_required_cap() {
    let (mock, gavel, _dir) = setup().await;
    let group = json!({"rubric": "research_report", "trajectories": [
        simple_traj("MET=revenue,growth,margin,guidance,source full"),
        simple_traj("MET=revenue,growth partial"),
        simple_traj("MET=growth,margin,guidance,source no revenue"),
    ]});
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{r}");
    // Weights: revenue 2 (required), growth 1, margin 1, guidance 1, source 0.5 → total 5.5.
    // The third misses the required item: 3.5/5.5 capped at required_cap 0.2.
    assert!(
        close(&floats(&r["rewards"]), &[1.0, 3.0 / 5.5, 0.2]),
        "{}",
        r["rewards"]
    );
    let items = r["scores"][1]["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert!(items.contains(&json!({"id": "revenue", "met": true})));
    assert!(items.contains(&json!({"id": "margin", "met": false})));
    // The judge saw the checklist and was asked for item verdicts in its schema.
    let req = &mock.requests()[0];
    assert!(req["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("- [revenue] (required) States Q3 2024 revenue"));
    assert_eq!(
        req["response_format"]["json_schema"]["schema"]["properties"]["scores"]["items"]
            ["properties"]["items"]["items"]["properties"]["id"]["enum"],
        json!(["revenue", "growth", "margin", "guidance", "source"])
    );
}

#[tokio::test]
async fn checklist_verdicts_missing_items_are_re_asked() {
    let (mock, gavel, _dir) = setup().await;
    mock.push(Behaviour::Content(
        json!({"scores": [{"trajectory_id": "1", "explanation": "", "items": [{"id": "revenue", "met": true}]}]}).to_string(),
    ));
    let group =
        json!({"rubric": "research_report", "trajectories": [simple_traj("MET=revenue only")]});
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["judge_calls"], 2);
    let reask = mock.requests()[1]["messages"][3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reask.contains("missing items: growth, margin, guidance, source"),
        "{reask}"
    );
}

#[tokio::test]
async fn shipped_rubrics_score_their_example_groups() {
    let (_mock, gavel, _dir) = setup().await;
    for (group, rubric, n) in [
        ("rag_answer", "rag_faithfulness", 4),
        ("retrieval_qa", "retrieval_qa", 4),
        ("research_report", "research_report", 4),
        ("agent_tool_use", "default", 4),
        ("all_identical", "default", 4),
    ] {
        let (status, r) = gavel.post("/v1/score_group", &example(group)).await;
        assert_eq!(status, 200, "{group}: {r}");
        assert_eq!(r["rubric"]["name"], rubric, "{group}");
        assert_eq!(r["rewards"].as_array().unwrap().len(), n, "{group}");
        assert!(
            r["rewards"]
                .as_array()
                .unwrap()
                .iter()
                .all(Value::is_number),
            "{group}: {r}"
        );
    }
}

#[tokio::test]
async fn bad_verifiers_and_policies_are_refused_by_field() {
    let (mock, gavel, _dir) = setup().await;
    let cases = [
        (
            json!({"verifiers": [{"type": "answer_line", "kind": "integer", "expected": "12x"}]}),
            "verifiers[0].expected",
        ),
        (
            json!({"verifiers": [{"type": "regex", "pattern": "("}]}),
            "verifiers[0].pattern",
        ),
        (
            json!({"verifiers": [{"type": "telepathy"}]}),
            "verifiers[0].type",
        ),
        (
            json!({"policy": {"type": "gate", "gate": "answer_line"}}),
            "policy: gate: no component named \"answer_line\"",
        ),
        (
            json!({"policy": {"type": "weighted", "weights": {"judge": -1}}}),
            "policy: weights.judge must be a finite number >= 0",
        ),
        (json!({"rubric": "retrieval_qa"}), "verifiers[0].expected"),
        (
            json!({"verifiers": [{"type": "regex", "pattern": "x", "name": "judge"}]}),
            "verifiers[0].name: \"judge\" is reserved",
        ),
    ];
    for (extra, want) in cases {
        let mut body = answers_group();
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, r) = gavel.post("/v1/score_group", &body).await;
        assert_eq!(status, 400, "{extra}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{msg:?} should contain {want:?}");
    }
    assert_eq!(mock.calls(), 0);
}

/// Weights and caller rewards anywhere in f64's range give the rewards and advantages their
/// arithmetic means, never a null, a 0 or an infinity; what cannot be computed is a 400 naming the
/// field.
#[tokio::test]
async fn rewards_and_weights_at_the_ends_of_f64_rank_as_they_should() {
    let (mock, gavel, _dir) = setup().await;
    let mut body = answers_group();
    body["verifiers"] = json!([{"type": "answer_line", "kind": "integer", "expected": 4120}]);
    body["policy"] = json!({"type": "weighted", "weights": {"judge": 1e308, "answer_line": 1e308}});
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    // Equal weights: (judge + answer_line) / 2; the right answer first.
    assert!(
        close(&floats(&r["rewards"]), &[0.8, 0.45, 0.15, 0.4]),
        "{}",
        r["rewards"]
    );

    let mut body = json!({"trajectories": [simple_traj("SCORE=0.2 a"), simple_traj("SCORE=0.6 b")],
        "policy": {"type": "weighted", "weights": {"independent_reward": 1.0}}});
    body["trajectories"][0]["reward"] = json!(1e308);
    body["trajectories"][1]["reward"] = json!(-1e308);
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(floats(&r["rewards"]), vec![1e308, -1e308]);
    let half = 0.5f64.sqrt();
    assert!(
        close(&floats(&r["advantages"]), &[half, -half]),
        "{}",
        r["advantages"]
    );

    // Unscaled advantages past f64's range: refused, naming the trajectory.
    let mut far = body.clone();
    far["trajectories"] = json!([simple_traj("a"), simple_traj("b"), simple_traj("c")]);
    for (t, r) in [1.7e308, -1.7e308, -1.7e308].into_iter().enumerate() {
        far["trajectories"][t]["reward"] = json!(r);
    }
    let batch = json!({"groups": [body.clone(), far], "scale_rewards": "none"});
    let (status, r) = gavel.post("/v1/score_groups", &batch).await;
    assert_eq!(status, 400, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("groups[1].trajectories[0].reward: with scale_rewards \"none\""),
        "{msg}"
    );

    // A policy of the caller's reward alone, and a trajectory that sends none.
    body["trajectories"][1]
        .as_object_mut()
        .unwrap()
        .remove("reward");
    let (status, r) = gavel.post("/v1/score_group", &body).await;
    assert_eq!(status, 400, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("trajectories[1].reward: missing"), "{msg}");
    assert_eq!(mock.calls(), 1, "only the first group needed the judge");
}

#[tokio::test]
async fn score_groups_scales_advantages_by_batch_or_group() {
    let (mock, gavel, _dir) = setup().await;
    // The golden vector's rewards: two groups of three.
    let g1 = common::marked_group(&[1.0, 0.0, 0.5]);
    let g2 = common::marked_group(&[0.25, 0.25, 0.25]);
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/grpo_golden.json"
        ))
        .unwrap(),
    )
    .unwrap();
    for mode in ["group", "batch", "none"] {
        let (status, r) = gavel
            .post(
                "/v1/score_groups",
                &json!({"groups": [g1, g2], "scale_rewards": mode}),
            )
            .await;
        assert_eq!(status, 200, "{r}");
        let adv: Vec<f64> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| floats(&g["advantages"]))
            .collect();
        assert!(
            close(&adv, &floats(&golden["advantages"][mode])),
            "{mode}: {adv:?}"
        );
    }
    // Two distinct groups → two judge calls; the later modes came from the cache.
    assert_eq!(mock.calls(), 2);
    let (_, r) = gavel
        .post("/v1/score_groups", &json!({"groups": [g1]}))
        .await;
    assert_eq!(r["usage"]["cache_hits"], 1);

    mock.set_fallback(Behaviour::Status(500, None, "down".into()));
    let g3 = common::marked_group(&[0.3, 0.4]);
    let (status, r) = gavel
        .post("/v1/score_groups", &json!({"groups": [g1, g3]}))
        .await;
    assert_eq!(status, 502, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("groups[1]: "),
        "{r}"
    );
    let mut g3_null = g3.clone();
    g3_null["on_judge_error"] = json!("null");
    let (status, r) = gavel
        .post("/v1/score_groups", &json!({"groups": [g1, g3_null]}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["results"][1]["rewards"], json!([null, null]));
    assert_eq!(r["results"][1]["advantages"], json!([0.0, 0.0]));
    let (status, r) = gavel
        .post(
            "/v1/score_groups",
            &json!({"groups": [g1, {"trajectories": []}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("groups[1].trajectories"),
        "{r}"
    );
}

/// A group answering one arithmetic task, graded under a rubric with `reference = "judge"`.
fn judge_reference_group(answers: &[&str]) -> Value {
    json!({
        "trajectories": answers.iter().map(|a| simple_traj(a)).collect::<Vec<_>>(),
        "rubric": {"name": "arith_ref", "text": "The answer must equal the reference.", "reference": "judge"},
    })
}

#[tokio::test]
async fn a_rubric_with_reference_judge_has_the_judge_answer_the_task_once_and_grade_against_it() {
    let (mock, gavel, _dir) = setup().await;
    // The first call is the judge's own answer; every later one a verdict.
    mock.push(Behaviour::Content("  4120  ".into()));
    mock.set_fallback(Behaviour::Score);
    let (status, r) = gavel
        .post(
            "/v1/score_group",
            &judge_reference_group(&["SCORE=0.9 ANSWER: 4120", "SCORE=0.2 ANSWER: 4100"]),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(floats(&r["rewards"]), vec![0.9, 0.2]);
    assert_eq!(r["judge_reference"], "4120", "{r}");
    // The answer and the verdict, both counted.
    assert_eq!(r["usage"]["judge_calls"], 2, "{r}");
    let asked = mock.requests();
    assert_eq!(asked.len(), 2);
    // The answer is asked with the task's own messages, free text (no verdict schema).
    assert_eq!(
        asked[0]["messages"],
        json!([
            {"role": "system", "content": "You answer arithmetic questions. End with ANSWER: <n>."},
            {"role": "user", "content": "What is 1030 * 4?"}
        ])
    );
    assert!(asked[0].get("response_format").is_none(), "{}", asked[0]);
    assert!(asked[1].get("response_format").is_some());
    // The verdict prompt shows the answer, trimmed, as the reference.
    let prompt = common::judge_prompt(&asked[1]);
    assert!(
        prompt.contains("<reference>\n\"4120\"\n</reference>"),
        "{prompt}"
    );

    // Another group of the same task: the stored answer, one call (the verdict).
    let (status, r) = gavel
        .post(
            "/v1/score_group",
            &judge_reference_group(&["SCORE=0.4 ANSWER: 4000", "SCORE=0.7 ANSWER: 4120"]),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["judge_calls"], 1, "{r}");
    assert_eq!(r["judge_reference"], "4120", "{r}");
    let asked = mock.requests();
    assert_eq!(asked.len(), 3);
    assert!(common::judge_prompt(&asked[2]).contains("<reference>\n\"4120\"\n</reference>"));

    // A request's own reference wins: the judge is not asked to answer.
    let mut own = judge_reference_group(&["SCORE=0.5 ANSWER: 4120", "SCORE=0.6 ANSWER: 1"]);
    own["reference"] = json!("4121");
    let (status, r) = gavel.post("/v1/score_group", &own).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["judge_calls"], 1, "{r}");
    assert!(r.get("judge_reference").is_none(), "{r}");
    let asked = mock.requests();
    assert!(common::judge_prompt(&asked[3]).contains("<reference>\n\"4121\"\n</reference>"));

    // `render` asks no judge: a placeholder says where the answer will go.
    let (status, r) = gavel
        .post("/v1/render", &judge_reference_group(&["A", "B"]))
        .await;
    assert_eq!(status, 200, "{r}");
    assert!(r["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("the judge's own answer to the task"));
    assert_eq!(mock.requests().len(), 4);
}

/// `reference_instruction` replaces the task's system message in what the judge answers, and
/// makes a stored answer of its own: the same task under the plain rubric is asked again.
#[tokio::test]
async fn a_reference_instruction_is_what_the_judge_answers_the_task_under() {
    let (mock, gavel, _dir) = setup().await;
    mock.push(Behaviour::Content("4120".into()));
    mock.set_fallback(Behaviour::Score);
    let mut group = judge_reference_group(&["SCORE=0.9 ANSWER: 4120", "SCORE=0.2 ANSWER: 4100"]);
    group["rubric"]["reference_instruction"] = json!("Reply with the number alone.");
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["judge_reference"], "4120", "{r}");
    let asked = mock.requests();
    assert_eq!(
        asked[0]["messages"],
        json!([
            {"role": "system", "content": "Reply with the number alone."},
            {"role": "user", "content": "What is 1030 * 4?"}
        ])
    );

    // The plain rubric's answer is another task's: asked again, under the task's own message.
    mock.push(Behaviour::Content("The product is 4120.".into()));
    let (status, r) = gavel
        .post(
            "/v1/score_group",
            &judge_reference_group(&["SCORE=0.9 ANSWER: 4120", "SCORE=0.2 ANSWER: 4100"]),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["judge_reference"], "The product is 4120.", "{r}");
    let asked = mock.requests();
    assert_eq!(asked.len(), 4);
    assert_eq!(asked[2]["messages"][0]["role"], "system");
    assert_ne!(
        asked[2]["messages"][0]["content"],
        "Reply with the number alone."
    );

    // Without reference = "judge" the key is refused, by name.
    let mut bad = json!({"trajectories": [simple_traj("SCORE=0.5 ANSWER: 1")],
                         "rubric": {"text": "t", "reference_instruction": "Be brief."}});
    let (status, r) = gavel.post("/v1/score_group", &bad).await;
    assert_eq!(status, 400, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("reference_instruction needs reference"),
        "{message}"
    );
    bad["rubric"]["reference"] = json!("judge");
    bad["rubric"]["reference_instruction"] = json!("  ");
    let (status, r) = gavel.post("/v1/score_group", &bad).await;
    assert_eq!(status, 400, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("reference_instruction is empty"));
}

#[tokio::test]
async fn a_judge_reference_that_fails_is_a_judge_error_never_a_score() {
    let (mock, gavel, _dir) = setup().await;
    // The judge refuses the answer call (400: not retried).
    mock.set_fallback(Behaviour::Status(400, None, "no".into()));
    let group = judge_reference_group(&["SCORE=0.9 ANSWER: 4120", "SCORE=0.2 ANSWER: 4100"]);
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 502, "{r}");
    assert_eq!(r["error"]["type"], "judge_unavailable");
    assert_eq!(mock.calls(), 1);

    // With on_judge_error null: null rewards, the error reported, no template (nothing rendered).
    let mut nullable = group.clone();
    nullable["on_judge_error"] = json!("null");
    let (status, r) = gavel.post("/v1/score_group", &nullable).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["rewards"], json!([null, null]));
    assert_eq!(r["error"]["type"], "judge_unavailable");
    assert!(r.get("judge_reference").is_none(), "{r}");

    // An empty answer is the judge's invalid output, and nothing is stored for it.
    mock.push(Behaviour::Content("   ".into()));
    mock.set_fallback(Behaviour::Score);
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 502, "{r}");
    assert_eq!(r["error"]["type"], "judge_invalid_output");
    mock.push(Behaviour::Content("4120".into()));
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["judge_calls"], 2, "{r}");

    // Trajectories of different tasks: the request's error, before any judge call.
    let calls = mock.calls();
    let mut mixed = group.clone();
    mixed["trajectories"][1]["messages"][1]["content"] = json!("What is 2 * 2?");
    let (status, r) = gavel.post("/v1/score_group", &mixed).await;
    assert_eq!(status, 400, "{r}");
    assert_eq!(r["error"]["type"], "invalid_request");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("rubric.reference") && message.contains("trajectories[1]"),
        "{message}"
    );
    assert_eq!(mock.calls(), calls);
}

/// `reference_f1` (and `reference_recall`) compares each final answer with the group's
/// reference: the request's, or under `reference = "judge"` the judge's own answer, asked even
/// when the policy needs no verdict.
#[tokio::test]
async fn reference_f1_scores_answers_against_the_request_or_the_judges_reference() {
    let (mock, gavel, _dir) = setup().await;
    let f1_only = |mut g: Value| {
        g["verifiers"] = json!([{"type": "reference_f1"}]);
        g["policy"] = json!({"type": "weighted", "weights": {"reference_f1": 1.0}});
        g
    };
    // The request's reference: no judge call at all.
    let mut own = f1_only(json!({"trajectories": [
        simple_traj("Paris"), simple_traj("It is Paris, France"), simple_traj("Lyon")]}));
    own["reference"] = json!("Paris.");
    let (status, r) = gavel.post("/v1/score_group", &own).await;
    assert_eq!(status, 200, "{r}");
    assert!(close(&floats(&r["rewards"]), &[1.0, 0.4, 0.0]), "{r}");
    assert_eq!(mock.calls(), 0);
    // Without any reference the check does not apply, and the policy has nothing to weigh.
    let mut none = own.clone();
    none.as_object_mut().unwrap().remove("reference");
    let (status, r) = gavel.post("/v1/score_group", &none).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["scores"][0]["components"]["reference_f1"],
        Value::Null,
        "{r}"
    );
    assert_eq!(
        r["scores"][0]["reasons"]["reference_f1"],
        "no reference to compare with"
    );

    // The judge's own answer: one call (the answer), no verdict.
    mock.push(Behaviour::Content("Paris".into()));
    let judged = f1_only(judge_reference_group(&[
        "Paris",
        "It is Paris, France",
        "Lyon",
    ]));
    let (status, r) = gavel.post("/v1/score_group", &judged).await;
    assert_eq!(status, 200, "{r}");
    assert!(close(&floats(&r["rewards"]), &[1.0, 0.4, 0.0]), "{r}");
    assert_eq!(r["judge_reference"], "Paris");
    assert_eq!(r["usage"]["judge_calls"], 1, "{r}");
    assert_eq!(mock.calls(), 1);

    // `reference_recall` over the same stored answer: the sentence that says all of it scores 1
    // (F1 gave it 0.4), and nothing asks the judge again.
    let mut recall = judged.clone();
    recall["verifiers"] = json!([{"type": "reference_recall"}]);
    recall["policy"] = json!({"type": "weighted", "weights": {"reference_recall": 1.0}});
    let (status, r) = gavel.post("/v1/score_group", &recall).await;
    assert_eq!(status, 200, "{r}");
    assert!(close(&floats(&r["rewards"]), &[1.0, 1.0, 0.0]), "{r}");
    assert_eq!(
        r["scores"][1]["reasons"]["reference_recall"],
        "token recall 1.000 against the reference"
    );
    assert_eq!(r["judge_reference"], "Paris");
    assert_eq!(mock.calls(), 1);
}
