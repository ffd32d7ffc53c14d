//! The local judge under a training loop's load, on the tiny random-weight models: a group's
//! questions packed into batched forwards give the scores they get one at a time, groups sent at
//! once get the scores they get alone, and `/metrics` shows the batches and the prefix cache.

use serde_json::{json, Value};

use super::serving::{example, local_config, tiny_models, with};
use crate::common::{rewards, Gavel};
use gavel::domain::prompt::JudgeMode;

fn usage(body: &Value, key: &str) -> u64 {
    body["usage"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {body}"))
}

/// The value of the sample of `name` whose labels include every one of `labels` (`k="v"`), in
/// Prometheus text.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (lab, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|want| lab.split(',').any(|l| l == *want))
            .then(|| value.trim().parse().ok())?
    })
}

/// Each mode's response to the example group from a judge packing at most `max_batch_tokens`
/// suffix tokens a forward, on a fresh store (judges differing only in batching share their
/// verdicts, as they should: their numbers are the same).
async fn judged(
    model: &std::path::Path,
    store: &std::path::Path,
    max_batch_tokens: usize,
) -> Vec<Value> {
    judged_in(model, store, max_batch_tokens, &["pointwise", "pairwise"]).await
}

async fn judged_in(
    model: &std::path::Path,
    store: &std::path::Path,
    max_batch_tokens: usize,
    modes: &[&str],
) -> Vec<Value> {
    let cfg = local_config(model, store, |j| {
        j.common.mode = Some(JudgeMode::Pointwise);
        j.max_batch_tokens = max_batch_tokens;
    });
    let gavel = Gavel::start(cfg).await;
    let mut out = Vec::new();
    for mode in modes {
        let group = with(example("rag_answer.json"), "judge_mode", json!(mode));
        let (status, body) = gavel.post("/v1/score_group", &group).await;
        assert_eq!(status, 200, "{body}");
        out.push(body);
    }
    gavel.stop().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_questions_give_the_scores_of_questions_run_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let n = example("rag_answer.json")["trajectories"]
        .as_array()
        .unwrap()
        .len() as u64;
    for (i, model) in tiny_models(tmp.path()).into_iter().enumerate() {
        let store = |s: &str| tmp.path().join(format!("{s}{i}"));
        let batched = judged(&model, &store("batched"), 1024).await;
        let one = judged(&model, &store("one"), 0).await;
        // A smaller limit: suffixes over it run alone (chunked), the rest in smaller batches.
        let few = judged(&model, &store("few"), 400).await;
        for (m, mode) in ["pointwise", "pairwise"].into_iter().enumerate() {
            let prompts = if mode == "pointwise" { n } else { n * (n - 1) };
            let (b, o, f) = (&batched[m], &one[m], &few[m]);
            let (rb, r1, rf) = (rewards(b), rewards(o), rewards(f));
            for ((b, o), f) in rb.iter().zip(&r1).zip(&rf) {
                assert!(
                    (b - o).abs() < 1e-4 && (f - o).abs() < 1e-4,
                    "{mode}: {rb:?} {r1:?} {rf:?}"
                );
            }
            let distinct: std::collections::BTreeSet<String> =
                r1.iter().map(|x| format!("{x:.6}")).collect();
            assert!(distinct.len() > 1, "{r1:?}");
            // The same prompts; the shared prefix once, then packed forwards (one for the four
            // pointwise prompts), against one forward per prompt; smaller batches take more.
            assert_eq!(usage(b, "prompt_tokens"), usage(o, "prompt_tokens"));
            assert_eq!(
                usage(o, "forward_passes"),
                prompts,
                "{mode}: {}",
                o["usage"]
            );
            let (passes, few_passes) = (usage(b, "forward_passes"), usage(f, "forward_passes"));
            if mode == "pointwise" {
                assert_eq!(passes, 2, "{mode}: {}", b["usage"]);
            }
            assert!(passes < prompts, "{mode}: {}", b["usage"]);
            assert!(
                few_passes > passes && few_passes <= prompts + 1,
                "{mode}: {}",
                f["usage"]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_sent_at_once_get_the_scores_they_get_alone() {
    let tmp = tempfile::tempdir().unwrap();
    // A file name of its own: the engine's gauges are labelled by it, and other tests in this
    // process run the same tiny model.
    let model = tmp.path().join("groups-at-once.gguf");
    std::fs::rename(tiny_models(tmp.path()).remove(1), &model).unwrap();
    let groups: Vec<Value> = (0..8).map(gavel::devbench::load::distinct_group).collect();
    // Room for several groups' suffixes (about 900 tokens a group on the tiny tokenizer) in
    // one forward.
    let pointwise = |j: &mut gavel::config::LocalConfig| {
        j.common.mode = Some(JudgeMode::Pointwise);
        j.max_batch_tokens = 4096;
    };

    let gavel = Gavel::start(local_config(&model, &tmp.path().join("a"), pointwise)).await;
    let mut alone = Vec::new();
    for g in &groups {
        let (status, body) = gavel.post("/v1/score_group", g).await;
        assert_eq!(status, 200, "{body}");
        alone.push(body);
    }
    gavel.stop().await;

    // A fresh store: every group judged again, all at once.
    let gavel = Gavel::start(local_config(&model, &tmp.path().join("b"), pointwise)).await;
    let at_once =
        futures::future::join_all(groups.iter().map(|g| gavel.post("/v1/score_group", g))).await;
    for (k, ((status, body), first)) in at_once.iter().zip(&alone).enumerate() {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(usage(body, "cache_hits"), 0);
        assert_eq!(rewards(body), rewards(first), "group {k}");
        // Each group prefilled its own prefix once, whatever ran between its prompts.
        assert_eq!(
            usage(body, "forward_passes"),
            2,
            "group {k}: {}",
            body["usage"]
        );
    }
    let distinct: std::collections::BTreeSet<String> =
        alone.iter().map(|b| format!("{:?}", rewards(b))).collect();
    assert!(distinct.len() > 1, "the groups are not distinct");

    let text = gavel.metrics_text().await;
    let batches = sample(&text, "gavel_local_batch_prompts_count", &[]).unwrap_or(0.0);
    // The engine's own gauges and cache counters carry its model and device.
    let engine = ["model=\"groups-at-once.gguf\"", "device=\"cpu\""];
    assert!(batches >= 1.0, "{text}");
    // Groups queued behind a group joined its packed forward (their 4 suffixes fit the room
    // under max_batch_tokens), and still got the scores they get alone (above), each counting
    // its prefix and the one forward it joined.
    let joined = sample(&text, "gavel_local_reading_jobs_joined_total", &engine).unwrap_or(0.0);
    assert!(joined >= 1.0, "{text}");
    // The counter's old name (deprecated) counts the same.
    let old = sample(&text, "gavel_local_probe_jobs_joined_total", &engine);
    assert_eq!(old, Some(joined), "{text}");
    assert!(
        sample(&text, "gavel_local_prefix_cache_bytes", &engine).is_some_and(|b| b > 0.0),
        "{text}"
    );
    assert!(
        sample(&text, "gavel_local_prefix_cache_hits_total", &engine).is_some_and(|h| h > 0.0),
        "{text}"
    );
    assert!(text.contains("# HELP gavel_local_queue_depth "), "{text}");
    // Every job answered: nothing queued.
    assert_eq!(
        sample(&text, "gavel_local_queue_depth", &engine),
        Some(0.0),
        "{text}"
    );
    gavel.stop().await;
}

/// With `GAVEL_TEST_MODEL` (CI: the 0.5B Q4_K_M): a group's pointwise questions packed into one
/// forward give the probabilities they give one at a time, on the real model's K-quant kernels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_model_batched_questions_equal_questions_run_alone() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!(
            "skipped: set GAVEL_TEST_MODEL to the 0.5B test model (tools/fetch-model.sh 0.5b)"
        );
        return;
    };
    let model = std::path::PathBuf::from(model);
    let tmp = tempfile::tempdir().unwrap();
    let batched = judged_in(&model, &tmp.path().join("a"), 1024, &["pointwise"]).await;
    let alone = judged_in(&model, &tmp.path().join("b"), 0, &["pointwise"]).await;
    let (rb, ra) = (rewards(&batched[0]), rewards(&alone[0]));
    for (b, a) in rb.iter().zip(&ra) {
        assert!((b - a).abs() < 1e-4, "{rb:?} vs {ra:?}");
    }
    assert_eq!(
        usage(&batched[0], "forward_passes"),
        2,
        "{}",
        batched[0]["usage"]
    );
    assert_eq!(
        usage(&alone[0], "forward_passes"),
        4,
        "{}",
        alone[0]["usage"]
    );
}

/// Listwise verdicts decoded together: groups sent at once to a judge that steps up to 8
/// generations in one forward get exactly the verdicts (scores and explanations) they get
/// decoded one at a time (Q8_0 weights: gavel's row kernels do not depend on the batch), and
/// `/metrics` counts the batched steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listwise_verdicts_decoded_together_equal_those_decoded_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("decode-together.gguf");
    std::fs::rename(tiny_models(tmp.path()).remove(1), &model).unwrap();
    let groups: Vec<Value> = (0..6)
        .map(|k| {
            with(
                gavel::devbench::load::distinct_group(k),
                "judge_mode",
                json!("listwise"),
            )
        })
        .collect();
    let engine = ["model=\"decode-together.gguf\"", "device=\"cpu\""];
    let mut runs = Vec::new();
    for (name, batch) in [("one", 1), ("together", 8)] {
        let listwise = |j: &mut gavel::config::LocalConfig| {
            j.common.mode = Some(JudgeMode::Listwise);
            j.max_decode_batch = batch;
        };
        let gavel = Gavel::start(local_config(&model, &tmp.path().join(name), listwise)).await;
        let before = sample(
            &gavel.metrics_text().await,
            "gavel_local_decode_batches_total",
            &engine,
        );
        let answers =
            futures::future::join_all(groups.iter().map(|g| gavel.post("/v1/score_group", g)))
                .await;
        let text = gavel.metrics_text().await;
        let batched = sample(&text, "gavel_local_decode_batches_total", &engine).unwrap_or(0.0)
            - before.unwrap_or(0.0);
        gavel.stop().await;
        let verdicts: Vec<(Vec<f64>, Vec<String>)> = answers
            .iter()
            .map(|(status, body)| {
                assert_eq!(*status, 200, "{body}");
                let explanations = body["scores"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["explanation"].as_str().unwrap_or_default().to_string())
                    .collect();
                (rewards(body), explanations)
            })
            .collect();
        runs.push((verdicts, batched));
    }
    let ((one, one_batched), (together, together_batched)) = (&runs[0], &runs[1]);
    assert_eq!(*one_batched, 0.0, "max_decode_batch 1 never batches");
    assert!(*together_batched > 0.0, "no step ran several generations");
    assert_eq!(one, together);
    assert!(
        one.iter().any(|(_, e)| e.iter().any(|e| !e.is_empty())),
        "no explanation was decoded: {one:?}"
    );
    let distinct: std::collections::BTreeSet<String> =
        one.iter().map(|(r, _)| format!("{r:?}")).collect();
    assert!(distinct.len() > 1, "the groups' verdicts are not distinct");
}
