//! Pointwise and pairwise judging on the tiny random-weight models: scores in 0–1 read from
//! token probabilities (no decoding), every pair asked in both orders, the group's shared prefix
//! prefilled once and reused (counted in `cached_prompt_tokens`), cached like any verdict; and the
//! refusals: a probability mode on a remote judge or a checklist rubric, a bad `judge_mode`.

use serde_json::{json, Value};

use super::serving::{example, local_config, tiny_models, with};
use crate::common::{rewards, Gavel};
use gavel::domain::prompt::JudgeMode;

fn usage(body: &Value, key: &str) -> u64 {
    body["usage"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pointwise_and_pairwise_read_probabilities_and_reuse_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_models(tmp.path()).remove(0);
    let cfg = local_config(&model, &tmp.path().join("store"), |j| {
        j.common.mode = Some(JudgeMode::Pointwise);
    });
    let gavel = Gavel::start(cfg).await;
    let rag = example("rag_answer.json");
    let n = rag["trajectories"].as_array().unwrap().len();

    // The configured mode: pointwise, one question per distinct trajectory.
    let (status, body) = gavel.post("/v1/score_group", &rag).await;
    assert_eq!(status, 200, "{body}");
    let r = rewards(&body);
    assert_eq!(r.len(), n);
    assert!(r.iter().all(|x| (0.0..=1.0).contains(x)), "{body}");
    assert_eq!(body["template"]["name"], "pointwise", "{body}");
    assert_eq!(
        usage(&body, "judge_calls"),
        n as u64,
        "one question per trajectory"
    );
    assert_eq!(usage(&body, "completion_tokens"), 0, "nothing decoded");
    // Two forward passes for the group: the prefix its prompts share, then every prompt's
    // own tokens packed into one batched forward; no decoding.
    assert_eq!(usage(&body, "forward_passes"), 2, "{}", body["usage"]);
    // No explanations unless `explain = true`. Each score says how sure it is: |2·P(yes) − 1|
    // times the answers' share of the distribution, so never more than the first factor.
    for s in body["scores"].as_array().unwrap() {
        assert_eq!(s["explanation"].as_str().unwrap_or(""), "", "{body}");
        let (c, p) = (
            s["confidence"].as_f64().unwrap(),
            s["components"]["judge"].as_f64().unwrap(),
        );
        assert!(c >= 0.0 && c <= (2.0 * p - 1.0).abs() + 1e-9, "{s}");
    }
    // Every prompt after the first starts from the KV of the shared prefix (system message,
    // rubric, shared context): at least that much of each of the n − 1 later prompts is reused.
    let (prompt, cached) = (
        usage(&body, "prompt_tokens"),
        usage(&body, "cached_prompt_tokens"),
    );
    assert!(cached > 100 * (n as u64 - 1), "{}", body["usage"]);
    assert!(cached < prompt, "{}", body["usage"]);
    // Random weights give distinct probabilities for distinct answers.
    let distinct: std::collections::BTreeSet<String> =
        r.iter().map(|x| format!("{x:.6}")).collect();
    assert!(distinct.len() > 1, "{r:?}");

    // `render` shows the mode's first prompt under the mode's template, and how many it asks.
    let (status, shown) = gavel
        .post(
            "/v1/render",
            &with(rag.clone(), "judge_mode", json!("pairwise")),
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["template"]["name"], "pairwise", "{shown}");
    assert_eq!(shown["prompts_asked"], n * (n - 1), "{shown}");
    // Tokens of every prompt together, and fewer after a prefix cache: the prompts share their
    // start (instructions, rubric, context), prefilled once.
    let tokens = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    let (first, asked, after) = (
        tokens(&shown, "prompt_tokens"),
        tokens(&shown, "prompt_tokens_asked"),
        tokens(&shown, "prompt_tokens_after_prefix_cache"),
    );
    assert!(asked > first, "{shown}");
    assert!(after < asked && after > first, "{shown}");
    let user = shown["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.contains("<trajectory id=\"1\">")
            && user.contains("<trajectory id=\"2\">")
            && !user.contains("<trajectory id=\"3\">"),
        "{user}"
    );
    let (_, listwise_shown) = gavel
        .post(
            "/v1/render",
            &with(rag.clone(), "judge_mode", json!("listwise")),
        )
        .await;
    assert_eq!(
        listwise_shown["template"]["name"], "relative",
        "{listwise_shown}"
    );
    assert!(
        listwise_shown.get("prompts_asked").is_none(),
        "{listwise_shown}"
    );
    assert_eq!(
        listwise_shown["prompt_tokens_asked"], listwise_shown["prompt_tokens"],
        "one prompt: {listwise_shown}"
    );

    // The request's mode overrides the judge's: pairwise asks every ordered pair.
    let pairwise = with(rag.clone(), "judge_mode", json!("pairwise"));
    let (status, body) = gavel.post("/v1/score_group", &pairwise).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["template"]["name"], "pairwise");
    assert_eq!(usage(&body, "judge_calls"), (n * (n - 1)) as u64);
    let r2 = rewards(&body);
    assert!(r2.iter().all(|x| (0.0..=1.0).contains(x)), "{body}");
    // Mean preferences over both orders of every pair average to ½ exactly.
    let mean = r2.iter().sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 1e-9, "{r2:?}");
    assert!(usage(&body, "cached_prompt_tokens") > 100 * (n * (n - 1) - 1) as u64);

    // Both verdicts are cached, under keys of their own.
    for (req, want) in [(&rag, &r), (&pairwise, &r2)] {
        let (_, again) = gavel.post("/v1/score_group", req).await;
        assert_eq!(usage(&again, "judge_calls"), 0);
        assert_eq!(usage(&again, "cache_hits"), 1);
        assert_eq!(&rewards(&again), want);
    }
    // Listwise on request is a third verdict.
    let listwise = with(rag.clone(), "judge_mode", json!("listwise"));
    let (status, body) = gavel.post("/v1/score_group", &listwise).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["template"]["name"], "relative");
    assert_eq!(usage(&body, "judge_calls"), 1);

    // A checklist rubric is judged listwise only.
    let report = with(
        example("research_report.json"),
        "judge_mode",
        json!("pointwise"),
    );
    let (status, body) = gavel.post("/v1/score_group", &report).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("judge_mode:"),
        "{body}"
    );
    let bad = with(rag.clone(), "judge_mode", json!("sideways"));
    let (status, body) = gavel.post("/v1/score_group", &bad).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"pairwise\""),
        "{body}"
    );
    gavel.stop().await;
}

/// A local judge whose config names no mode judges pointwise (the default the README's
/// figures chose); `explain = true` adds an explanation to each score after it is read, and the
/// scores are those of the judge without explanations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_mode_is_pointwise_and_explanations_never_move_a_score() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_models(tmp.path()).remove(0);
    let plain = Gavel::start(local_config(&model, &tmp.path().join("a"), |j| {
        j.common.mode = None
    }))
    .await;
    let rag = example("rag_answer.json");
    let n = rag["trajectories"].as_array().unwrap().len();
    let (status, body) = plain.post("/v1/score_group", &rag).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["template"]["name"], "pointwise", "{body}");
    let scores = rewards(&body);
    plain.stop().await;

    let explaining = Gavel::start(local_config(&model, &tmp.path().join("b"), |j| {
        j.common.mode = None;
        j.explain = true;
        j.max_explanation_bytes = 24;
    }))
    .await;
    let (status, body) = explaining.post("/v1/score_group", &rag).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rewards(&body), scores, "an explanation changed a score");
    // n questions, then n explanations decoded (random weights still emit tokens).
    assert_eq!(
        usage(&body, "judge_calls"),
        2 * n as u64,
        "{}",
        body["usage"]
    );
    assert!(usage(&body, "completion_tokens") > 0, "{}", body["usage"]);
    assert!(
        usage(&body, "forward_passes") > 2 * n as u64,
        "{}",
        body["usage"]
    );
    let explanations: Vec<&str> = body["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["explanation"].as_str().unwrap_or(""))
        .collect();
    assert!(explanations.iter().all(|e| e.len() <= 24), "{body}");
    assert!(explanations.iter().any(|e| !e.is_empty()), "{body}");
    explaining.stop().await;
}

/// A trajectory's pointwise score does not depend on the order the group's prompts were asked
/// in (which changes how much of each prompt the prefix cache supplies): on the Q8_0 GGUF model,
/// whose short forwards would otherwise quantize activations, the reversed group gets exactly
/// the reversed scores, and pairwise the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probability_scores_do_not_depend_on_the_order_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_models(tmp.path()).remove(1);
    let gavel = Gavel::start(local_config(&model, &tmp.path().join("store"), |_| {})).await;
    let rag = example("rag_answer.json");
    let mut reversed = rag.clone();
    reversed["trajectories"].as_array_mut().unwrap().reverse();
    for mode in ["pointwise", "pairwise"] {
        let (s1, a) = gavel
            .post(
                "/v1/score_group",
                &with(rag.clone(), "judge_mode", json!(mode)),
            )
            .await;
        let (s2, b) = gavel
            .post(
                "/v1/score_group",
                &with(reversed.clone(), "judge_mode", json!(mode)),
            )
            .await;
        assert_eq!((s1, s2), (200, 200), "{a} {b}");
        assert_eq!(
            usage(&b, "cache_hits"),
            0,
            "asked again, in the other order"
        );
        let mut rb = rewards(&b);
        rb.reverse();
        // Exactly the same probabilities; pairwise sums them in another order (1e-16).
        for (x, y) in rewards(&a).iter().zip(&rb) {
            assert!((x - y).abs() < 1e-12, "{mode}: {:?} vs {rb:?}", rewards(&a));
        }
    }
    gavel.stop().await;
}

/// A rubric with `reference = "judge"` on a local judge: the model decodes its own answer to
/// the task once (free text, within `max_reference_bytes`), then judges pointwise; a second
/// group of the same task reuses the stored answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_judge_answers_the_task_once_before_judging_against_it() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_models(tmp.path()).remove(0);
    let cfg = local_config(&model, &tmp.path().join("store"), |j| {
        j.common.mode = Some(JudgeMode::Pointwise);
        j.common.max_reference_bytes = 12;
    });
    let gavel = Gavel::start(cfg).await;
    let rubric = json!({"text": "Agrees with the reference.", "reference": "judge"});
    let rag = with(example("rag_answer.json"), "rubric", rubric);
    let n = rag["trajectories"].as_array().unwrap().len() as u64;
    let (status, body) = gavel.post("/v1/score_group", &rag).await;
    assert_eq!(status, 200, "{body}");
    // n questions, plus the answer, the only thing decoded.
    assert_eq!(usage(&body, "judge_calls"), n + 1, "{}", body["usage"]);
    let decoded = usage(&body, "completion_tokens");
    assert!(decoded > 0, "{}", body["usage"]);
    // 12 bytes are at most 12 tokens (random weights rarely stop sooner).
    assert!(decoded <= 12, "{}", body["usage"]);
    let first = rewards(&body);

    // The same task with one trajectory fewer: the stored answer, and each question's reading
    // stored too (the same prompts: a pointwise prompt shows one trajectory after the same
    // reference), so nothing is asked.
    let mut fewer = rag.clone();
    fewer["trajectories"].as_array_mut().unwrap().pop();
    let (status, body) = gavel.post("/v1/score_group", &fewer).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(usage(&body, "judge_calls"), 0, "{}", body["usage"]);
    assert_eq!(usage(&body, "completion_tokens"), 0, "{}", body["usage"]);
    let again = rewards(&body);
    assert_eq!(again.len(), first.len() - 1);
    for (a, b) in again.iter().zip(&first) {
        assert!((a - b).abs() < 1e-12, "{again:?} vs {first:?}");
    }
    // On a fresh store the readings are asked again: pointwise scores do not depend on the
    // group (to the float noise of a smaller batched forward).
    let other = tempfile::tempdir().unwrap();
    let cfg = local_config(&model, &other.path().join("store"), |j| {
        j.common.mode = Some(JudgeMode::Pointwise);
        j.common.max_reference_bytes = 12;
    });
    let fresh = Gavel::start(cfg).await;
    let (status, body) = fresh.post("/v1/score_group", &fewer).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(usage(&body, "judge_calls"), n, "{}", body["usage"]);
    for (a, b) in rewards(&body).iter().zip(&first) {
        assert!((a - b).abs() < 1e-5, "{body} vs {first:?}");
    }
    fresh.stop().await;
    gavel.stop().await;
}

/// The real 0.5B test model's own answer to a question it knows, through the judge API
/// (`GAVEL_TEST_MODEL`): plain free text from the base model, cut to `max_reference_bytes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_local_judge_answers_a_task_it_knows() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!("skipped: set GAVEL_TEST_MODEL to the 0.5B test model (tools/fetch-model.sh 0.5b) to ask a real judge for its own answer");
        return;
    };
    use gavel::domain::prompt::ChatMessage;
    use gavel::judge::Judge;
    let mut cfg = gavel::config::LocalConfig::new(std::path::PathBuf::from(model));
    cfg.common.max_reference_bytes = 40;
    let judge = gavel::judge::LocalJudge::new("j", &cfg).unwrap();
    let task = [
        ChatMessage {
            role: "system".into(),
            content: "Answer in one word.".into(),
        },
        ChatMessage {
            role: "user".into(),
            content: "What is the capital of France?".into(),
        },
    ];
    let answer = judge.answer(&task).await.unwrap();
    assert!(answer.text.contains("Paris"), "{:?}", answer.text);
    assert!(answer.text.len() <= 40, "{:?}", answer.text);
    assert!(answer.completion_tokens > 0);
}
