//! The configuration's own tests: parsing, checks, the shipped examples.

use super::*;
use crate::domain::device::DeviceSpec;

fn env(k: &str) -> Option<String> {
    (k == "MY_KEY").then(|| "sk-secret-123".to_string())
}

#[test]
fn judges_resolve_keys_from_env_and_redact_them() {
    let cfg = Config::from_toml(
        "default_judge = \"a\"\n[judges.a]\nbackend = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"MY_KEY\"\n",
        "g.toml",
        &env,
    )
    .unwrap();
    let a = cfg.judges["a"].as_remote().unwrap();
    assert_eq!(a.api_key.as_ref().unwrap().expose(), "sk-secret-123");
    assert!(!format!("{cfg:?}").contains("sk-secret"));
    assert_eq!(a.common.structured_output, StructuredOutput::Auto);
    assert_eq!(cfg.server.max_body_bytes, 16 * 1024 * 1024);
}

#[test]
fn errors_name_file_and_line() {
    let e = Config::from_toml("[server]\nmax_body = 3\n", "g.toml", &env).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("g.toml:2: unknown field `max_body`"),
        "{e}"
    );
    let e = Config::from_toml("default_judge = \"x\"\n", "g.toml", &env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "g.toml: default_judge \"x\" is not a [judges.NAME] table"
    );
}

#[test]
fn the_shipped_example_config_is_valid() {
    let text = include_str!("../../examples/gavel.toml");
    let cfg = Config::from_toml(text, "examples/gavel.toml", &|_| None).unwrap();
    assert_eq!(cfg.default_judge_name(), Some("openai"));
    assert_eq!(
        cfg.judges["openai"]
            .as_remote()
            .unwrap()
            .requests_per_minute,
        Some(500)
    );
    assert_eq!(cfg.server.max_in_flight, 256);
    assert_eq!(cfg.openrlhf.group_size, 8);
    assert_eq!(cfg.store.pool_size, 16);
    assert!(cfg.store.url.is_none());
    // The commented Postgres line, switched on, is valid too.
    let on = text.replace("# url = \"postgres://", "url = \"postgres://");
    let cfg = Config::from_toml(&on, "examples/gavel.toml", &|_| None).unwrap();
    assert_eq!(
        cfg.store.url.as_ref().map(Secret::expose),
        Some("postgres://gavel@postgres:5432/gavel")
    );
    // The local judge is commented out (its model does not ship); uncommented, it is valid.
    assert!(!cfg.judges.contains_key("local"));
    let mut in_table = false;
    let on: Vec<&str> = text
        .lines()
        .map(|l| {
            in_table = l == "# [judges.local]" || (in_table && l.starts_with("# "));
            if in_table {
                &l[2..]
            } else {
                l
            }
        })
        .collect();
    let cfg = Config::from_toml(&on.join("\n"), "examples/gavel.toml", &|_| None).unwrap();
    let local = cfg.judges["local"].as_local().unwrap();
    assert_eq!((local.device, local.max_queue), (DeviceSpec::Cpu, 64));
    assert_eq!(local.prefix_cache_bytes, Some(1 << 30));
    assert!(
        !local.model_path.as_os_str().is_empty()
            && local.common.structured_output != StructuredOutput::Off
    );
}

#[test]
fn openrlhf_section_is_checked() {
    let e = Config::from_toml("[openrlhf]\ngroup_size = 0\n", "g.toml", &env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "g.toml: [openrlhf] group_size must be 1..=64 ([server] max_group_size)"
    );
    let e = Config::from_toml("[openrlhf]\njudge = \"nope\"\n", "g.toml", &env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "g.toml: [openrlhf] judge \"nope\" is not a [judges.NAME] table"
    );
    let cfg = Config::from_toml("[openrlhf]\nwait_ms = 50\n", "g.toml", &env).unwrap();
    assert_eq!(
        (cfg.openrlhf.wait_ms, cfg.openrlhf.rubric.as_str()),
        (50, "default")
    );
}

#[test]
fn api_keys_come_from_the_file_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(
        &file,
        "# operators\nkey-from-file-1\n\n  key-from-file-2  \n",
    )
    .unwrap();
    let toml = format!(
        "[server]\napi_keys_file = {:?}\n",
        file.display().to_string()
    );
    let env = |k: &str| (k == "GAVEL_API_KEYS").then(|| " key-env-1, ,key-env-2".to_string());
    let cfg = Config::from_toml(&toml, "g.toml", &env).unwrap();
    let keys: Vec<&str> = cfg.server.api_keys.iter().map(Secret::expose).collect();
    assert_eq!(
        keys,
        [
            "key-from-file-1",
            "key-from-file-2",
            "key-env-1",
            "key-env-2"
        ]
    );
    assert!(
        !format!("{cfg:?}").contains("key-"),
        "keys are redacted in Debug"
    );
    let from_env = Config::from_env(&env).unwrap();
    assert_eq!(from_env.server.api_keys.len(), 2);
    // No keys: auth stays off.
    let cfg = Config::from_toml("", "g.toml", &|_| None).unwrap();
    assert!(cfg.server.api_keys.is_empty());
    assert_eq!(cfg.server.open_paths, ["/healthz", "/readyz", "/metrics"]);

    std::fs::write(&file, "# only a comment\n").unwrap();
    let e = Config::from_toml(&toml, "g.toml", &|_| None).unwrap_err();
    assert!(
        e.to_string().ends_with("api_keys_file holds no keys"),
        "{e}"
    );
    let missing = format!(
        "[server]\napi_keys_file = {:?}\n",
        dir.path().join("nope").display().to_string()
    );
    let e = Config::from_toml(&missing, "g.toml", &|_| None).unwrap_err();
    assert!(e.to_string().contains("nope: cannot read"), "{e}");
    let e = Config::from_toml("[server]\nopen_paths = [\"metrics\"]\n", "g.toml", &|_| {
        None
    })
    .unwrap_err();
    assert!(e.to_string().contains("\"metrics\" is not a path"), "{e}");
}

#[test]
fn store_urls_are_checked_and_redacted() {
    let cfg = Config::from_toml(
        "[store]\nurl = \"postgres://gavel:hunter2@db/gavel\"\nclaim_ttl_s = 5\n",
        "g.toml",
        &env,
    )
    .unwrap();
    assert_eq!(cfg.store.describe(), "postgres://gavel:***@db/gavel");
    assert!(!format!("{cfg:?}").contains("hunter2"));
    let e = Config::from_toml("[store]\nurl = \"mysql://u:pw@db/x\"\n", "g.toml", &env)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "g.toml: [store] url \"mysql://u:***@db/x\" is not a postgres:// or postgresql:// URL"
    );
    let e = Config::from_toml("[store]\nclaim_ttl_s = 0\n", "g.toml", &env).unwrap_err();
    assert!(e.to_string().contains("claim_ttl_s"), "{e}");
}

#[test]
fn local_judges_need_a_model_path_and_openai_ones_a_model() {
    let e = Config::from_toml("[judges.a]\nbackend = \"openai\"\n", "g.toml", &env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "g.toml: [judges.a]: backend \"remote\" needs model (the API's model name)"
    );
    let e = Config::from_toml("[judges.l]\nbackend = \"local\"\n", "g.toml", &env).unwrap_err();
    assert!(e.to_string().contains("needs model_path"), "{e}");
    let ok = "[judges.l]\nbackend = \"local\"\nmodel_path = \"m.gguf\"\ndevice = \"cuda:1\"\n";
    let cfg = Config::from_toml(ok, "g.toml", &env).unwrap();
    let l = cfg.judges["l"].as_local().unwrap();
    assert_eq!(
        (l.device, l.max_queue, l.prefix_cache_bytes),
        (DeviceSpec::Cuda(1), 64, None)
    );
    let bad = ok.replace("cuda:1", "gpu0");
    let e = Config::from_toml(&bad, "g.toml", &env)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("g.toml") && e.contains("gpu0"), "{e}");
    assert!(e.contains("expected \"cpu\" or \"cuda:N\""), "{e}");
    let e = Config::from_toml(&format!("{ok}max_queue = 0\n"), "g.toml", &env).unwrap_err();
    assert!(e.to_string().contains("max_queue must be > 0"), "{e}");
    let e = Config::from_toml(&format!("{ok}max_decode_batch = 0\n"), "g.toml", &env).unwrap_err();
    assert!(
        e.to_string().contains("max_decode_batch must be > 0"),
        "{e}"
    );
}

#[test]
fn each_backend_reads_its_own_keys_and_refuses_the_others() {
    let remote = "[judges.r]\nbackend = \"remote\"\nmodel = \"m\"\nmax_concurrency = 2\n";
    let r = Config::from_toml(remote, "g.toml", &env).unwrap();
    let old = remote.replace("\"remote\"", "\"openai\"");
    let o = Config::from_toml(&old, "g.toml", &env).unwrap();
    for cfg in [&r, &o] {
        let j = &cfg.judges["r"];
        assert_eq!(j.backend(), Backend::Remote);
        assert_eq!(j.as_remote().unwrap().max_concurrency, Some(2));
        assert_eq!(j.common().unwrap().model, "m");
    }
    // A key of the other backend is refused by name, at the table's line.
    let e = Config::from_toml(
        &format!("# judges\n{remote}adapter = \"a\"\n"),
        "g.toml",
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("g.toml:2: "), "{e}");
    assert!(
        e.contains(
            "[judges.r]: adapter is a key of backend \"local\"; this judge's backend is \"remote\""
        ),
        "{e}"
    );
    let local = "[judges.l]\nbackend = \"local\"\nmodel_path = \"m.gguf\"\n";
    let e = Config::from_toml(
        &format!("{local}requests_per_minute = 60\n"),
        "g.toml",
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("requests_per_minute is a key of backend \"remote\""),
        "{e}"
    );
    // Keys of neither are refused as before; shared keys reach both.
    let e = Config::from_toml(&format!("{local}max_queu = 1\n"), "g.toml", &env)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `max_queu`"), "{e}");
    let cfg = Config::from_toml(
        &format!("{local}deadline_s = 9\nmax_tokens = 7\n"),
        "g.toml",
        &env,
    )
    .unwrap();
    let l = cfg.judges["l"].as_local().unwrap();
    assert_eq!((l.common.deadline_s, l.common.max_tokens), (9.0, 7));
}

#[test]
fn the_kubernetes_configs_are_valid() {
    // The ConfigMaps' gavel.toml of the CPU base and the GPU overlay (local judge).
    let base = include_str!("../../k8s/config/gavel.toml");
    let cfg = Config::from_toml(base, "k8s/config/gavel.toml", &|_| None).unwrap();
    assert!(!cfg.judges.is_empty());
    let gpu = include_str!("../../k8s/overlays/gpu/gavel.toml");
    let cfg = Config::from_toml(gpu, "k8s/overlays/gpu/gavel.toml", &|_| None).unwrap();
    assert_eq!(cfg.judges["local"].backend(), Backend::Local);
    assert_eq!(
        cfg.judges["local"].as_local().unwrap().device,
        DeviceSpec::Cuda(0)
    );
}

#[test]
fn no_file_builds_a_default_judge_from_env() {
    let cfg = Config::from_env(&|k| match k {
        "OPENAI_BASE_URL" => Some("http://127.0.0.1:1234/v1".into()),
        "GAVEL_JUDGE_MODEL" => Some("qwen".into()),
        "GAVEL_JUDGE_STRUCTURED_OUTPUT" => Some("json_object".into()),
        _ => None,
    })
    .unwrap();
    let d = cfg.judges["default"].as_remote().unwrap();
    assert_eq!(d.base_url, "http://127.0.0.1:1234/v1");
    assert_eq!(d.common.model, "qwen");
    assert!(d.api_key.is_none());
    assert!(!d.key_required, "a server of one's own may need no key");
    assert_eq!(d.common.structured_output, StructuredOutput::JsonObject);
    assert_eq!(cfg.default_judge_name(), Some("default"));

    // OpenAI's API needs its key.
    let openai = Config::from_env(&|_| None).unwrap();
    assert!(openai.judges["default"].as_remote().unwrap().key_required);
    let e =
        Config::from_env(&|k| (k == "GAVEL_JUDGE_STRUCTURED_OUTPUT").then(|| "json".to_string()))
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("GAVEL_JUDGE_STRUCTURED_OUTPUT") && e.contains("\"json\" is not one of auto"),
        "{e}"
    );
}

#[test]
fn a_remote_judge_may_read_probabilities() {
    let read = |table: &str| {
        let text = format!("[judges.j]\nbackend = \"remote\"\nmodel = \"m\"\n{table}");
        Config::from_toml(&text, "g.toml", &|_| None)
    };
    let cfg = read("mode = \"pairwise\"\ntop_logprobs = 5").unwrap();
    let j = cfg.judges["j"].as_remote().unwrap();
    assert_eq!(
        (j.common.mode, j.top_logprobs),
        (Some(crate::domain::prompt::JudgeMode::Pairwise), 5)
    );
    let e = read("top_logprobs = 0").unwrap_err().to_string();
    assert!(
        e.contains("[judges.j]: top_logprobs must be 1 to 100"),
        "{e}"
    );
}

#[test]
fn a_key_is_required_where_named_or_for_openai() {
    let read = |table: &str| {
        let text = format!("[judges.j]\nbackend = \"remote\"\nmodel = \"m\"\n{table}");
        let cfg = Config::from_toml(&text, "g.toml", &|_| None).unwrap();
        cfg.judges["j"].as_remote().unwrap().key_required
    };
    assert!(read(""), "the default base_url is OpenAI's");
    assert!(read("base_url = \"https://api.openai.com/v1\""));
    assert!(!read("base_url = \"http://127.0.0.1:8080/v1\""));
    assert!(!read("base_url = \"http://vllm.judges:8000/v1\""));
    assert!(read(
        "base_url = \"http://127.0.0.1:8080/v1\"\napi_key_env = \"K\""
    ));
}

#[test]
fn durations_must_be_finite_and_bounded() {
    // Each of these passed validation before and then panicked in `Duration::from_secs_f64`
    // (per request for request_timeout_s, at start for a judge's timeouts).
    let judge = "[judges.j]\nbackend = \"openai\"\nmodel = \"m\"\n";
    for (toml, key) in [
        (
            "[server]\nrequest_timeout_s = inf\n".to_string(),
            "request_timeout_s",
        ),
        (
            "[server]\nrequest_timeout_s = 1e300\n".to_string(),
            "request_timeout_s",
        ),
        (
            "[server]\nready_cache_s = inf\n".to_string(),
            "ready_cache_s",
        ),
        (format!("{judge}timeout_s = inf\n"), "timeout_s"),
        (format!("{judge}deadline_s = 1e20\n"), "deadline_s"),
        (format!("{judge}max_backoff_s = nan\n"), "max_backoff_s"),
        ("[store]\nclaim_ttl_s = 1e30\n".to_string(), "claim_ttl_s"),
    ] {
        let e = Config::from_toml(&toml, "g.toml", &|_| None).unwrap_err();
        assert!(e.to_string().contains(key), "{toml}: {e}");
    }
    let ok = format!("{judge}timeout_s = 60\n[server]\nrequest_timeout_s = 2592000\n");
    Config::from_toml(&ok, "g.toml", &|_| None).unwrap();
}
