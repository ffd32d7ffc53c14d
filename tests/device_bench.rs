//! `benches/gpu.sh` on the CPU (`GAVEL_BENCH_DEVICE=cpu`: tiny shapes), as CI runs it between
//! GPU draws: the script and `gavel bench-device` must keep producing the complete report.
#![cfg(feature = "train")]

use std::process::Command;

use serde_json::Value;

fn has_number(v: &Value, path: &str) {
    let mut x = v;
    for key in path.split('.') {
        x = &x[key];
    }
    let n = x
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {x}"));
    assert!(n.is_finite() && n >= 0.0, "{path} = {n}");
}

#[test]
fn gpu_script_on_cpu_writes_the_complete_report() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/gpu.sh"))
        .env("GAVEL_BENCH_DEVICE", "cpu")
        .env("GAVEL_BIN", env!("CARGO_BIN_EXE_gavel"))
        .env("OUT", out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("device-bench.json")).unwrap(),
    )
    .unwrap();

    let shapes = report["shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), 1);
    assert_eq!(shapes[0]["shape"], "tiny");
    has_number(&shapes[0], "parameters");
    let devices = shapes[0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d["device"], "cpu");
    for k in [
        "load_s",
        "prompt_tokens",
        "prefill_s",
        "prefill_tok_s",
        "decode_tokens",
        "decode_tok_s",
    ] {
        has_number(&d["model"], k);
    }
    // Two sizes × three modes × prefix cache on and off, each judged (no store hit).
    let groups = d["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 12);
    let mut seen = std::collections::BTreeSet::new();
    for g in groups {
        for k in [
            "group_s",
            "judge_calls",
            "prompt_tokens",
            "reused_tokens",
            "completion_tokens",
            "forward_passes",
        ] {
            has_number(g, k);
        }
        assert!(g["judge_calls"].as_u64().unwrap() >= 1, "{g}");
        seen.insert((
            g["trajectories"].as_u64().unwrap(),
            g["mode"].as_str().unwrap().to_string(),
            g["prefix_cache"].as_bool().unwrap(),
        ));
        // With the prefix cache off, nothing is reused.
        if g["prefix_cache"] == false {
            assert_eq!(g["reused_tokens"], 0, "{g}");
        }
    }
    assert_eq!(seen.len(), 12);
    // The pointwise prompts of a group share their start: with the cache on, some is reused.
    assert!(groups.iter().any(|g| g["prefix_cache"] == true
        && g["mode"] == "pointwise"
        && g["reused_tokens"].as_u64().unwrap() > 0));

    let t = &report["train"];
    for k in [
        "tokens",
        "step_s",
        "train_s",
        "tokens_per_s",
        "grad_norm",
        "flops",
        "tflops_per_s",
        "peak_rss_bytes",
    ] {
        has_number(t, k);
    }
    // A GRPO loss may be negative; it must be a number.
    assert!(t["loss"].as_f64().is_some_and(f64::is_finite), "{t}");
    assert!(
        t["grad_norm"].as_f64().unwrap() > 0.0,
        "the step computed gradients: {t}"
    );
    // No peak given on the CPU: MFU is present and null, not left out.
    assert!(t.as_object().unwrap().contains_key("mfu") && t["mfu"].is_null());

    let c = &report["logits_check"];
    for k in [
        "prompt_tokens",
        "max_abs_diff",
        "max_abs_logit",
        "tolerance",
    ] {
        has_number(c, k);
    }
    // The same device twice: identical logits.
    assert_eq!(c["max_abs_diff"].as_f64(), Some(0.0));
    assert_eq!(c["agree"], true);
    assert_eq!(c["same_argmax"], true);

    let md = std::fs::read_to_string(out.path().join("device-bench.md")).unwrap();
    assert!(md.contains("| tiny | cpu |"), "{md}");
    assert!(md.contains("GRPO+LoRA step, tiny shape on cpu"), "{md}");
    assert_eq!(md.matches("| tiny | cpu | 8 |").count(), 6, "{md}");

    // The load runs: each setting at each concurrency, every group judged through the daemon.
    let load: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("load-tiny/bench-load.json")).unwrap(),
    )
    .unwrap();
    let runs = load["runs"].as_array().unwrap();
    let settings: Vec<(u64, u64)> = runs
        .iter()
        .map(|r| {
            (
                r["max_batch_tokens"].as_u64().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(settings, [(0, 1), (0, 4), (1024, 1), (1024, 4)]);
    for r in runs {
        for k in ["wall_s", "groups_per_s", "latency_mean_s", "computed_tok_s"] {
            has_number(r, k);
        }
        assert!(
            r["prompt_tokens"].as_u64().unwrap() > r["computed_tokens"].as_u64().unwrap(),
            "{r}"
        );
        // Four pointwise prompts a group: alone, a forward each; batched, the shared prefix
        // and one packed forward.
        let passes = if r["max_batch_tokens"] == 0 { 16 } else { 8 };
        assert_eq!(r["forward_passes"], passes, "{r}");
    }
    // The listwise load runs: verdicts decoded one at a time and up to 8 together, at each
    // concurrency, every run decoding tokens.
    let listwise: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("load-listwise-tiny/bench-load.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(listwise["mode"], "listwise");
    let runs = listwise["runs"].as_array().unwrap();
    let settings: Vec<(u64, u64)> = runs
        .iter()
        .map(|r| {
            (
                r["max_decode_batch"].as_u64().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(settings, [(1, 1), (1, 4), (8, 1), (8, 4)]);
    for r in runs {
        has_number(r, "completion_tok_s");
        assert!(r["completion_tokens"].as_u64().unwrap() > 0, "{r}");
    }
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("Load, tiny on cpu, pointwise:"), "{stdout}");
    assert!(stdout.contains("Load, tiny on cpu, listwise:"), "{stdout}");
}
