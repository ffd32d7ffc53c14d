//! Local judges on one model share it (`judge::build_all`): one loaded model and prefix cache,
//! each judge running its own adapter. On a tiny random Q8_0 model: every judge's probabilities
//! are those of the same judge loaded alone, a verdict adapter's question starts from the base
//! judge's cached prefix, an every-position adapter's never does, and a judge with other engine
//! settings gets a model of its own.

use std::collections::BTreeMap;
use std::path::Path;

use gavel::domain::prompt::ChatMessage;
use gavel::judge::config::LocalConfig;
use gavel::judge::local::LocalJudge;
use gavel::judge::{self, Judge};
use gavel::model::adapter::Reach;

use super::adapters::{options, record_for, write_adapter};
use crate::common::model::testkit;

fn messages(question: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage {
            role: "system".into(),
            content: "You grade answers against the knowledge given. Reply yes or no.".into(),
        },
        ChatMessage {
            role: "user".into(),
            content: format!("Knowledge: the river is 40 km long.\nAnswer: {question}\nRight?"),
        },
    ]
}

fn choices() -> Vec<Vec<String>> {
    vec![vec!["yes".into()], vec!["no".into()]]
}

fn config(model: &Path, adapter: Option<&Path>) -> LocalConfig {
    let mut cfg = LocalConfig::new(model);
    cfg.adapter = adapter.map(Path::to_path_buf);
    cfg
}

/// The local tables as a configuration's judges.
fn judges_of(
    configs: &BTreeMap<String, LocalConfig>,
) -> BTreeMap<String, gavel::judge::JudgeConfig> {
    configs
        .iter()
        .map(|(name, c)| (name.clone(), gavel::judge::JudgeConfig::Local(c.clone())))
        .collect()
}

/// (P(yes), prompt tokens, of them cached) of one question.
async fn read_one(judge: &dyn Judge, question: &str) -> (f64, u64, u64) {
    let p = judge
        .probabilities()
        .expect("a local judge reads probabilities")
        .choice_probabilities(vec![messages(question)], &choices())
        .await
        .unwrap()
        .remove(0);
    (p.shares[0], p.prompt_tokens, p.cached_prompt_tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judges_on_one_model_share_it_and_each_runs_its_own_adapter() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    testkit::write_gguf(&gguf, &options(), &[]).unwrap();
    let (a, b, every) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("all"),
    );
    write_adapter(&a, 1, Some(&record_for(&gguf)));
    write_adapter(&b, 2, Some(&record_for(&gguf)));
    let mut all = record_for(&gguf);
    all.reach = Reach::All;
    write_adapter(&every, 3, Some(&all));

    let mut own = config(&gguf, Some(&a));
    own.prefix_cache_bytes = Some(5 << 20); // other engine settings: a model of its own
    let configs = BTreeMap::from([
        ("base".to_string(), config(&gguf, None)),
        ("tuned_a".to_string(), config(&gguf, Some(&a))),
        ("tuned_b".to_string(), config(&gguf, Some(&b))),
        ("tuned_a_again".to_string(), config(&gguf, Some(&a))),
        ("every".to_string(), config(&gguf, Some(&every))),
        ("own".to_string(), own),
    ]);
    let judges = judge::build_all(&judges_of(&configs)).unwrap();
    let j = |name: &str| judges[name].as_ref();

    // The base judge prefills the prompt; a verdict adapter on the same model reruns only the
    // last tokens (at least 3 are run, so every question takes the same arithmetic).
    let q = "It is 40 km long.";
    let (base, n, cached) = read_one(j("base"), q).await;
    assert_eq!(cached, 0);
    let (pa, n_a, cached_a) = read_one(j("tuned_a"), q).await;
    assert_eq!(
        (n_a, cached_a),
        (n, n - 3),
        "tuned_a did not start from base's prefix"
    );
    let (pb, _, cached_b) = read_one(j("tuned_b"), q).await;
    assert_eq!(cached_b, n - 3);
    // An every-position adapter changes the context's keys and values: it never starts from
    // the base model's, and does from its own.
    let (pe, _, cached_e) = read_one(j("every"), q).await;
    assert_eq!(
        cached_e, 0,
        "an every-position adapter reused the base model's context"
    );
    assert_eq!(read_one(j("every"), q).await.2, n - 3);
    // Other engine settings: its own model, which has seen nothing yet.
    let (p_own, _, cached_own) = read_one(j("own"), q).await;
    assert_eq!(cached_own, 0);

    // Each judge's probabilities are those of the same configuration loaded alone.
    for (name, shared) in [
        ("base", base),
        ("tuned_a", pa),
        ("tuned_b", pb),
        ("every", pe),
        ("own", p_own),
    ] {
        let alone = LocalJudge::new(name, &configs[name]).unwrap();
        let (p, _, _) = read_one(&alone, q).await;
        assert!(
            (p - shared).abs() < 1e-6,
            "{name}: alone {p}, shared {shared}"
        );
    }
    // ... and they differ, so running the wrong slot would have shown.
    for (x, y) in [(base, pa), (pa, pb), (base, pe), (pa, pe)] {
        assert!((x - y).abs() > 1e-4, "{x} vs {y}");
    }
    assert_eq!(read_one(j("tuned_a_again"), q).await.0, pa);
    // Judges that differ only in their adapter keep different verdict cache keys.
    assert_ne!(j("tuned_a").identity(), j("tuned_b").identity());
    assert_ne!(j("base").identity(), j("tuned_a").identity());
    assert_eq!(j("tuned_a").identity(), j("tuned_a_again").identity());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_adapter_fails_the_start_naming_the_judges_that_share_its_model() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    testkit::write_gguf(&gguf, &options(), &[]).unwrap();
    let missing = tmp.path().join("missing");
    let configs = BTreeMap::from([
        ("base".to_string(), config(&gguf, None)),
        ("tuned".to_string(), config(&gguf, Some(&missing))),
    ]);
    let e = judge::build_all(&judges_of(&configs))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[judges.base], [judges.tuned]"), "{e}");
    assert!(e.contains("missing"), "{e}");
}

/// Through the daemon: a base judge and its tuned judge (a verdict adapter) on one model, in
/// pointwise mode. The tuned judge's calls on a group the base judge has just judged prefill
/// only each question's last tokens, its rewards differ from the base's, and `/healthz` names the
/// adapter it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_daemon_a_tuned_judge_reuses_its_base_judges_prefixes() {
    use super::serving::{example, local_config, tiny_models};
    use crate::common::Gavel;
    let tmp = tempfile::tempdir().unwrap();
    // The Qwen3 Q8_0 GGUF, with room for the example's prompts.
    let gguf = tiny_models(tmp.path()).remove(1);
    let a = tmp.path().join("a");
    write_adapter(&a, 1, Some(&record_for(&gguf)));
    let mut cfg = local_config(&gguf, &tmp.path().join("store"), |j| {
        j.common.mode = Some(gavel::domain::prompt::JudgeMode::Pointwise);
    });
    let mut tuned = cfg.judges["tiny"].clone();
    tuned.as_local_mut().unwrap().adapter = Some(a.clone());
    cfg.judges.insert("tuned".into(), tuned);
    let gavel = Gavel::start(cfg).await;

    let (status, health) = gavel.get("/healthz").await;
    assert_eq!(status, 200, "{health}");
    let judges = health["judges"].as_array().unwrap();
    let by_name = |n: &str| judges.iter().find(|j| j["name"] == n).unwrap().clone();
    assert!(by_name("tiny").get("adapter").is_none(), "{health}");
    let adapter = &by_name("tuned")["adapter"];
    assert_eq!(adapter["reach"], "verdict", "{health}");
    assert_eq!(adapter["path"], a.display().to_string(), "{health}");
    assert_eq!(adapter["sha256"].as_str().unwrap().len(), 64, "{health}");

    let mut group = example("rag_answer.json");
    group["judge"] = serde_json::json!("tiny");
    let (status, base) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{base}");
    group["judge"] = serde_json::json!("tuned");
    let (status, tuned) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{tuned}");
    let u = &tuned["usage"];
    let (prompt, cached, calls) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["cached_prompt_tokens"].as_u64().unwrap(),
        u["judge_calls"].as_u64().unwrap(),
    );
    // Every question reran its last 3 tokens only: the rest was the base judge's.
    assert_eq!(cached, prompt - 3 * calls, "{u}");
    assert_ne!(
        base["scores"], tuned["scores"],
        "the adapter changed nothing"
    );
}
