"""Renders each kustomization in k8s/ and checks what comes out.

1. `kubectl kustomize DIR` must build it.
2. Every object must validate (strict: no unknown fields) against the Kubernetes schemas of
   each version in KUBERNETES_VERSIONS (kubernetes-validate, offline).
3. gavel's own rules: non-root, read-only root filesystem and resources on every container;
   probes on the daemon; a termination grace period above request_timeout_s plus the preStop
   pause; selectors that match; a GPU only in the GPU overlay; an indexed rescore Job whose
   --shard count equals its completions.

Prints one line per kustomization; exits 1 with every problem listed.
"""

import subprocess
import sys
import tomllib

import kubernetes_validate
import yaml

KUSTOMIZATIONS = ["overlays/cpu", "overlays/gpu", "postgres", "rescore"]
# The oldest supported release with every field used (backoffLimitPerIndex is GA in 1.33) and
# the newest the schemas cover.
KUBERNETES_VERSIONS = ["1.33.0", "1.37.0"]
GPU = "nvidia.com/gpu"


def render(kustomization):
    out = subprocess.run(
        ["kubectl", "kustomize", f"k8s/{kustomization}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"k8s/{kustomization}: kubectl kustomize failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def schema_problems(obj, version):
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = "/".join(str(p) for p in e.path)
        return [f"Kubernetes {version}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"Kubernetes {version}: no schema: {e}"]
    return []


def pod_spec(obj):
    kind = obj["kind"]
    if kind in ("Deployment", "StatefulSet", "Job"):
        return obj["spec"]["template"]["spec"]
    return None


def name(obj):
    return f"{obj['kind']}/{obj['metadata']['name']}"


def config_toml(objs):
    """The gavel.toml of the rendered gavel-config ConfigMap."""
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("gavel-config"):
            return tomllib.loads(o["data"]["gavel.toml"])
    return None


def check_pods(objs, kustomization, problems):
    cfg = config_toml(objs)
    for o in objs:
        spec = pod_spec(o)
        if spec is None:
            continue
        where = f"{name(o)}"
        pod_sc = spec.get("securityContext", {})
        if not pod_sc.get("runAsNonRoot"):
            problems.append(f"{where}: pod securityContext.runAsNonRoot is not true")
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: automountServiceAccountToken is not false")
        for c in spec["containers"]:
            cw = f"{where} container {c['name']}"
            sc = c.get("securityContext", {})
            if not sc.get("readOnlyRootFilesystem"):
                problems.append(f"{cw}: readOnlyRootFilesystem is not true")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{cw}: allowPrivilegeEscalation is not false")
            res = c.get("resources", {})
            if not res.get("requests") or "memory" not in res.get("limits", {}):
                problems.append(f"{cw}: needs resource requests and a memory limit")
            if GPU in res.get("limits", {}) and kustomization != "overlays/gpu":
                problems.append(f"{cw}: asks for {GPU} outside the GPU overlay")
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "gavel":
            check_daemon(o, spec, cfg, kustomization, problems)
        if o["kind"] == "Job":
            check_rescore_job(o, spec, problems)


def check_daemon(o, spec, cfg, kustomization, problems):
    where = name(o)
    c = spec["containers"][0]
    for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        got = c.get(probe, {}).get("httpGet", {}).get("path")
        if got != path:
            problems.append(f"{where}: {probe} must GET {path}, has {got}")
    if cfg is None:
        problems.append(f"{where}: no gavel-config ConfigMap rendered")
        return
    server = cfg.get("server", {})
    timeout = server.get("request_timeout_s", 900)
    pause = 0
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if pre_stop[:1] == ["sleep"]:
        pause = float(pre_stop[1])
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < timeout + pause:
        problems.append(
            f"{where}: terminationGracePeriodSeconds {grace} < request_timeout_s {timeout}"
            f" + preStop pause {pause}"
        )
    open_paths = server.get("open_paths", ["/healthz", "/readyz", "/metrics"])
    for path in ("/healthz", "/readyz"):
        if path not in open_paths:
            problems.append(f"{where}: kubelet probes {path}, which is not in open_paths")
    if not str(server.get("addr", "")).startswith("0.0.0.0:"):
        problems.append(f"{where}: [server] addr must listen on 0.0.0.0 in a pod")
    wants_gpu = GPU in c.get("resources", {}).get("limits", {})
    if (kustomization == "overlays/gpu") != wants_gpu:
        problems.append(f"{where}: {GPU} limit present: {wants_gpu}, in {kustomization}")
    if kustomization == "overlays/gpu":
        backends = {j.get("backend") for j in cfg.get("judges", {}).values()}
        if "local" not in backends:
            problems.append(f"{where}: the GPU overlay's config has no local judge")


def check_rescore_job(o, spec, problems):
    where = name(o)
    job = o["spec"]
    if job.get("completionMode") != "Indexed":
        problems.append(f"{where}: completionMode is not Indexed")
    args = spec["containers"][0].get("args", [])
    shard = [a for a in args if a.startswith("--shard=")]
    want = f"--shard=$(JOB_COMPLETION_INDEX)/{job.get('completions')}"
    if shard != [want]:
        problems.append(f"{where}: expected {want} among the args, got {shard}")
    if args[:1] != ["rescore"]:
        problems.append(f"{where}: the container must run `gavel rescore`")


def check_selectors(objs, problems):
    pods = [
        (o, o["spec"]["template"]["metadata"].get("labels", {}))
        for o in objs
        if o["kind"] in ("Deployment", "StatefulSet")
    ]
    for o in objs:
        sel = None
        if o["kind"] == "Service":
            sel = o["spec"].get("selector")
        elif o["kind"] == "PodDisruptionBudget":
            sel = o["spec"]["selector"]["matchLabels"]
        if sel is None:
            continue
        if not any(all(labels.get(k) == v for k, v in sel.items()) for _, labels in pods):
            problems.append(f"{name(o)}: selector {sel} matches no pod template")
    for o in objs:
        if o["kind"] == "HorizontalPodAutoscaler":
            ref = o["spec"]["scaleTargetRef"]
            if not any(p["kind"] == ref["kind"] and p["metadata"]["name"] == ref["name"] for p, _ in pods):
                problems.append(f"{name(o)}: scales {ref['kind']}/{ref['name']}, which is not rendered")


def check_references(objs, problems):
    """Every ConfigMap, Secret and PVC a pod mounts exists in the build (or is the base's Secret)."""
    have = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for o in objs:
        spec = pod_spec(o)
        if spec is None:
            continue
        for v in spec.get("volumes", []):
            if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in have:
                problems.append(f"{name(o)}: ConfigMap {v['configMap']['name']} is not rendered")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                if ("PersistentVolumeClaim", claim) not in have:
                    problems.append(f"{name(o)}: PersistentVolumeClaim {claim} is not rendered")


def main():
    failed = False
    for k in KUSTOMIZATIONS:
        objs = render(k)
        problems = []
        for obj in objs:
            for version in KUBERNETES_VERSIONS:
                problems += [f"{name(obj)}: {p}" for p in schema_problems(obj, version)]
        check_pods(objs, k, problems)
        check_selectors(objs, problems)
        check_references(objs, problems)
        kinds = sorted({o["kind"] for o in objs})
        if problems:
            failed = True
            print(f"k8s/{k}: {len(problems)} problems")
            for p in problems:
                print(f"  {p}")
        else:
            versions = " and ".join(KUBERNETES_VERSIONS)
            print(f"k8s/{k}: {len(objs)} objects valid for Kubernetes {versions} ({', '.join(kinds)})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
