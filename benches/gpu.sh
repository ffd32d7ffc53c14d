#!/usr/bin/env bash
# The local judge and the trainer on a lent GPU, in one command (BENCHMARKS.md, "Local judge
# and trainer on a GPU"): `gavel bench-device` on models of the real Qwen2.5-0.5B and 1.5B
# shapes with random weights written on the machine, on the GPU and on the machine's CPU cores,
# then one GRPO+LoRA step and a CUDA-vs-CPU logits check; then `gavel bench-load`: distinct
# 4-trajectory groups through the daemon at concurrency 1, 8 and 64, groups/s, on each shape,
# pointwise (batched questions) and listwise (verdicts decoded one at a time and together).
# Writes $OUT/device-bench.json, $OUT/device-bench.md, $OUT/load-SHAPE/bench-load.{json,md} and
# $OUT/load-listwise-SHAPE/bench-load.{json,md}.
#
#   benches/gpu.sh                               # on the GPU machine, with tools/gpu-binary.sh's
#                                                # target/gpu/gavel-cuda.xz carried there
#   GAVEL_BENCH_DEVICE=cpu benches/gpu.sh        # anywhere: tiny shapes on the CPU (CI runs this)
#
# Environment: GAVEL_BIN (default: on a GPU target/gpu/release/gavel, unpacked from
# target/gpu/gavel-cuda.xz when only that is there; on cpu target/release/gavel),
# GAVEL_BENCH_DEVICE (default cuda:0), OUT (default target/device-bench), PEAK_TFLOPS (the GPU's
# dense f32 peak for MFU; default 67, an H100/H200 SXM's), SHAPES (default "0.5b,1.5b"; "tiny" on
# the CPU), LOAD_GROUPS (groups a load run sends; default 64), LOAD_BATCH_TOKENS (max_batch_tokens
# settings of the load runs; default "0,1024"), LOAD_DECODE_BATCH (max_decode_batch settings of
# the listwise load runs; default "1,64").
set -euo pipefail
cd "$(dirname "$0")/.."
device=${GAVEL_BENCH_DEVICE:-cuda:0}
if [[ $device == cpu ]]; then bin=${GAVEL_BIN:-target/release/gavel}; else bin=${GAVEL_BIN:-target/gpu/release/gavel}; fi
out=${OUT:-target/device-bench}
mkdir -p "$out"

if [[ $device == cpu ]]; then
  args=(--shapes "${SHAPES:-tiny}" --device cpu --decode-steps 8)
else
  packed=target/gpu/gavel-cuda.xz
  if [[ -z ${GAVEL_BIN:-} && ! -x $bin && -f $packed ]]; then
    mkdir -p "$(dirname "$bin")"
    # xz, or Python's lzma where the machine has no xz.
    xz -dc "$packed" > "$bin.tmp" 2>/dev/null ||
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$packed" "$bin.tmp"
    chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin"
  fi
  # The driver, the CUDA runtime, cuBLAS and cuRAND are linked dynamically: use the machine's
  # CUDA 13 libraries (a CUDA install, or the nvidia-* wheels of a PyTorch venv) when the loader
  # does not find them.
  for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 \
           /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
           /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib; do
    [[ -d $d ]] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
  done
  export LD_LIBRARY_PATH
  # A GPU window is minutes long: say at once what is missing, not after a model load.
  [[ -x $bin ]] || { echo "benches/gpu.sh: no binary at $bin (tools/gpu-binary.sh makes it)" >&2; exit 1; }
  if missing=$(ldd "$bin" | grep "not found"); then
    echo "benches/gpu.sh: $bin cannot load:" >&2; echo "$missing" >&2; exit 1
  fi
  # The CPU side times the bare model only: a 1.5B group on 16 cores takes minutes.
  args=(--shapes "${SHAPES:-0.5b,1.5b}" --device "$device" --device cpu
        --group-device "$device" --decode-steps 64 --peak-tflops "${PEAK_TFLOPS:-67}")
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
  # Peak GPU memory while the benchmark runs, sampled every 100 ms.
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/gpu-memory.txt" &
  smi=$!
  trap 'kill $smi 2>/dev/null || true' EXIT
fi

start=$(date +%s)
"$bin" bench-device --out "$out" "${args[@]}"
echo "benches/gpu.sh: $(( $(date +%s) - start )) s" >&2

# The engine under a training loop's load: groups/s at each concurrency, with batched forwards
# and with each prompt alone.
if [[ $device == cpu ]]; then
  load_shapes=(tiny); load=(--groups 4 --concurrency 1,4 --max-batch-tokens 0,1024)
  listwise=(--groups 4 --concurrency 1,4 --max-decode-batch 1,8)
else
  IFS=, read -r -a load_shapes <<< "${SHAPES:-0.5b,1.5b}"
  load=(--groups "${LOAD_GROUPS:-64}" --concurrency 1,8,64 --max-batch-tokens "${LOAD_BATCH_TOKENS:-0,1024}")
  listwise=(--groups "${LOAD_GROUPS:-64}" --concurrency 1,64 --max-decode-batch "${LOAD_DECODE_BATCH:-1,64}")
fi
for shape in "${load_shapes[@]}"; do
  "$bin" bench-load --model "$shape" --device "$device" "${load[@]}" --output "$out/load-$shape" \
    > /dev/null
  "$bin" bench-load --model "$shape" --device "$device" "${listwise[@]}" --mode listwise \
    --explain-bytes 200 --output "$out/load-listwise-$shape" > /dev/null
done
echo "benches/gpu.sh: $(( $(date +%s) - start )) s with the load runs" >&2

if [[ $device != cpu ]]; then
  kill "$smi" 2>/dev/null || true
  peak=$(sort -n "$out/gpu-memory.txt" | tail -1)
  echo "GPU: $(cat "$out/gpu.txt"); peak memory used while running: ${peak} MiB" >> "$out/device-bench.md"
fi
cat "$out/device-bench.md"
for shape in "${load_shapes[@]}"; do
  echo; echo "Load, $shape on $device, pointwise:"; cat "$out/load-$shape/bench-load.md"
  echo; echo "Load, $shape on $device, listwise:"; cat "$out/load-listwise-$shape/bench-load.md"
done
