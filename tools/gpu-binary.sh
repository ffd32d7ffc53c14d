#!/usr/bin/env bash
# The gavel binary that travels to a lent GPU machine, built here without a GPU: a release build
# with `--features cuda` for x86-64, symbols stripped, linked against CUDA 13.0 from
# `tools/cuda-toolkit.sh --link`, then compressed with xz (candle's kernels, PTX text and SASS,
# are most of its ~87 MiB and compress well; the device tool carries at most 64 MiB). Prints the
# path of the compressed binary on stdout; sizes and the shared libraries it needs on stderr.
#
#   tools/gpu-binary.sh      # target/gpu/release/gavel and target/gpu/gavel-cuda.xz
#
# benches/gpu.sh unpacks target/gpu/gavel-cuda.xz on the GPU machine. There the binary needs the
# driver (libcuda.so.1) and CUDA 13's libcudart, libcublas, libcublasLt and libcurand: a CUDA 13
# install, or the nvidia-* wheels of a PyTorch venv (benches/gpu.sh finds either). Those are
# hundreds of MB, too much to carry beside it. Built in its own target folder (CARGO_TARGET_DIR,
# default target/gpu), so the CPU build is untouched; about 21 minutes cold on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(tools/cuda-toolkit.sh --link)"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/gpu}
CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --features cuda --bin gavel >&2
bin=$CARGO_TARGET_DIR/release/gavel
packed=$CARGO_TARGET_DIR/gavel-cuda.xz
xz -T0 -6 -c "$bin" > "$packed.tmp" && mv "$packed.tmp" "$packed"
mib() { echo "$(( $(stat -c %s "$1") * 10 / 1048576 ))" | sed 's/\(.\)$/.\1/'; }
echo "gpu-binary: $bin $(mib "$bin") MiB, $packed $(mib "$packed") MiB; needs:" \
  "$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')" >&2
echo "$packed"
