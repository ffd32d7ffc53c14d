#!/usr/bin/env bash
# NVIDIA's CUDA 13.0 compiler and libraries from their PyPI wheels, for building gavel's `cuda`
# feature on a machine with no CUDA install (CI; the development machine). Prints the
# environment for cargo on stdout, everything else on stderr:
#
#   eval "$(tools/cuda-toolkit.sh)"          # nvcc, nvvm, headers: enough for `cargo check`
#   cargo check --features cuda
#   eval "$(tools/cuda-toolkit.sh --link)"   # also link stubs: for `cargo build` (no GPU needed)
#   cargo build --release --features cuda
#
# Pinned to CUDA 13.0 because the GPU machines run driver 580 (CUDA 13.0): PTX from a newer
# toolkit does not load under it. Every wheel is pinned by version and sha256, installed with
# `pip --require-hashes --no-deps` (unpinned, pip pulls nvidia-nvvm and nvidia-cuda-crt 13.5 as
# dependencies, and ptxas 13.0 then rejects their PTX: "Unsupported .version 9.5"). All of them
# land in one folder, `$venv/lib/python3.*/site-packages/nvidia/cu13`, which is the CUDA root.
#
# Idempotent: a stamp beside the venv records what was installed; a run that finds it installs
# nothing. When the toolkit changes, the PTX candle compiled with the old one is removed
# (`target/*/build/candle-kernels-*`: cargo does not rebuild it on its own).
#
# A user with their own CUDA 13 install does not need this: put its `bin` on PATH, set
# CUDA_ROOT (or CUDA_PATH) to it and CUDA_COMPUTE_CAP to the GPU's (90 for H100/H200).
#
# Environment: CUDA_VENV (default target/cuda-venv), CUDA_COMPUTE_CAP (default 90).
set -euo pipefail
cd "$(dirname "$0")/.."

link=0
case "${1:-}" in
  "") ;;
  --link) link=1 ;;
  *) echo "usage: tools/cuda-toolkit.sh [--link]" >&2; exit 2 ;;
esac

venv=${CUDA_VENV:-target/cuda-venv}

# name==version --hash=sha256:... (the x86-64 manylinux wheels; pip refuses any other file).
compile_set=$(cat <<'PINS'
nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia-cuda-runtime==13.0.96 --hash=sha256:7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649
PINS
)
want=$compile_set

stamp=$venv.stamp
have=$(cat "$stamp" 2>/dev/null || true)
if [[ $have == "$want" && -x $venv/bin/python ]]; then
  echo "cuda-toolkit: already installed in $venv" >&2
else
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv" >&2
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  printf '%s\n' "$want" > "$req"
  echo "cuda-toolkit: installing CUDA 13.0 wheels into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: -r "$req" >&2
  if [[ -n $have ]]; then
    # Another compiler made the kernels before: their PTX would be reused as is.
    rm -rf target/*/build/candle-kernels-* target/*/*/build/candle-kernels-*
    echo "cuda-toolkit: toolkit changed; removed candle's compiled kernels" >&2
  fi
  printf '%s' "$want" > "$stamp"
fi

root=$(echo "$PWD/$venv"/lib/python3*/site-packages/nvidia/cu13)
[[ -x $root/bin/nvcc ]] || { echo "cuda-toolkit: no nvcc in $root" >&2; exit 1; }
# Build scripts look for libraries under lib64 as well as lib.
[[ -e $root/lib64 ]] || ln -s lib "$root/lib64"

link_path=$root/lib
if [[ $link == 1 ]]; then
  # Linking needs libcuda (the driver), cuBLAS, cuBLASLt, cuRAND and NVRTC, which candle's cudarc
  # links dynamically. The driver cannot be installed here, and the others are hundreds of MB of
  # wheels, far more than a binary can carry to a GPU machine (64 MiB): link against stubs
  # instead, as NVIDIA's own toolkit does for the driver. A stub has the real library's soname
  # and exports every function cudarc binds (read from cudarc's bindings), each an empty body;
  # at run time the loader finds the real libraries by soname on the GPU machine. The CUDA
  # runtime itself (libcudart, 1 MB) is real, from the runtime wheel.
  stubs=$PWD/$venv/link-stubs
  cudarc=$(cargo metadata --format-version 1 --features cuda 2>/dev/null | python3 -c '
import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "cudarc"))')
  if [[ $(cat "$stubs/.from" 2>/dev/null) != "$cudarc" ]]; then
    rm -rf "$stubs" && mkdir -p "$stubs"
    # library:soname:cudarc module
    for spec in cuda:libcuda.so.1:driver cublas:libcublas.so.13:cublas \
                cublasLt:libcublasLt.so.13:cublaslt curand:libcurand.so.10:curand \
                nvrtc:libnvrtc.so.13:nvrtc; do
      IFS=: read -r lib soname module <<< "$spec"
      grep -oE '^pub unsafe fn [A-Za-z_][A-Za-z0-9_]*' "$cudarc/src/$module/sys/mod.rs" \
        | awk '{ print $4 }' | sort -u | sed 's/.*/void &(void) {}/' > "$stubs/$lib.c"
      [[ -s $stubs/$lib.c ]] || { echo "cuda-toolkit: no functions for $lib in $cudarc" >&2; exit 1; }
      cc -shared -fPIC -Wl,-soname,"$soname" -o "$stubs/lib$lib.so" "$stubs/$lib.c"
    done
    ln -sf "$root/lib/libcudart.so.13" "$stubs/libcudart.so"
    printf '%s' "$cudarc" > "$stubs/.from"
    echo "cuda-toolkit: link stubs in $stubs (from $cudarc)" >&2
  fi
  link_path=$stubs:$root/lib
fi

# candle's kernels are built by cudaforge, which runs nvcc on half the cores by default: one at a
# time on a 2-core machine, ten minutes of serial nvcc for the quantized matmul kernels alone.
threads=${CUDAFORGE_THREADS:-$(nproc)}

cat <<ENV
export CUDA_ROOT='$root'
export CUDA_PATH='$root'
export CUDA_TOOLKIT_ROOT_DIR='$root'
export CUDA_COMPUTE_CAP='${CUDA_COMPUTE_CAP:-90}'
export CUDAFORGE_THREADS='$threads'
export PATH='$root/bin':"\$PATH"
export LIBRARY_PATH='$link_path':"\${LIBRARY_PATH:-}"
export LD_LIBRARY_PATH='$root/lib':"\${LD_LIBRARY_PATH:-}"
ENV
