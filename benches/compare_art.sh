#!/usr/bin/env bash
# gavel vs OpenPipe ART's RULER on benches/data/groups.jsonl (BENCHMARKS.md, figures 3 and 4).
#
#   benches/compare_art.sh           # installs ART into target/art-venv when missing, then runs
#   benches/compare_art.sh --fresh   # recreates target/art-venv first
#
# The install step is the only one that goes past 127.0.0.1 (PyPI, through pip). The benchmark
# itself (cargo bench --bench compare_art, which starts benches/art_ruler.py) talks only to the
# mock judge and gavel on 127.0.0.1.
#
# openpipe-art is installed whole (its base dependencies: litellm, openai, polars, weave, ...;
# about 550 MB, a minute or two on the 2-core machine). Its optional extras (torch, unsloth, vllm)
# are not needed by art.rewards.ruler and not installed.
set -euo pipefail
cd "$(dirname "$0")/.."

ART_VERSION="${ART_VERSION:-0.5.18}"
VENV=target/art-venv

if [[ "${1:-}" == "--fresh" ]]; then
    rm -rf "$VENV"
fi
have() {
    "$VENV/bin/python" - "$ART_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
sys.exit(0 if md.version("openpipe-art") == sys.argv[1] else 1)
PY
}
if ! have; then
    echo "compare_art.sh: installing openpipe-art==$ART_VERSION into $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "openpipe-art==$ART_VERSION"
fi

python3 benches/data/make_groups.py --check
ART_PYTHON="$PWD/$VENV/bin/python" cargo bench --bench compare_art
