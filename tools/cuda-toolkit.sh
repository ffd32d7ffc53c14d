#!/usr/bin/env bash
# NVIDIA's CUDA 13.0 compiler and libraries from their PyPI wheels, for building gavel's `cuda`
# feature on a machine with no CUDA install (CI; the development machine). Prints the
# environment for cargo on stdout, everything else on stderr:
#
#   eval "$(tools/cuda-toolkit.sh)"          # nvcc, nvvm, headers: enough for `cargo check`
#   cargo check --features cuda
#   eval "$(tools/cuda-toolkit.sh --link)"   # also cuBLAS, cuRAND, NVRTC: for `cargo build`
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
link_set=$(cat <<'PINS'
nvidia-cuda-nvrtc==13.0.88 --hash=sha256:ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575
nvidia-curand==10.4.0.35 --hash=sha256:1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc
nvidia-cublas==13.0.2.14 --hash=sha256:0cf238ffdbe46c00cb9aa98e7bca745c223a5ca5a53e686ac8b3e5a08fe80d6c
PINS
)
want=$compile_set
[[ $link == 1 ]] && want="$compile_set"$'\n'"$link_set"

stamp=$venv.stamp
have=$(cat "$stamp" 2>/dev/null || true)
# A stamp of the compile set is also satisfied by one that has the link set on top.
if [[ -n $have && $have == "$want"* && -x $venv/bin/python ]]; then
  echo "cuda-toolkit: already installed in $venv" >&2
else
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv" >&2
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  printf '%s\n' "$want" > "$req"
  echo "cuda-toolkit: installing CUDA 13.0 wheels into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: -r "$req" >&2
  if [[ -n $have && $have != "$compile_set"* ]]; then
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

cat <<ENV
export CUDA_ROOT='$root'
export CUDA_PATH='$root'
export CUDA_TOOLKIT_ROOT_DIR='$root'
export CUDA_COMPUTE_CAP='${CUDA_COMPUTE_CAP:-90}'
export PATH='$root/bin':"\$PATH"
export LIBRARY_PATH='$root/lib':"\${LIBRARY_PATH:-}"
export LD_LIBRARY_PATH='$root/lib':"\${LD_LIBRARY_PATH:-}"
ENV
