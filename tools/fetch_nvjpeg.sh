#!/usr/bin/env bash
# tools/fetch_nvjpeg.sh CUDA_HOME DIR - nvJPEG for data.decoder = nvjpeg,
# run by `make deps`. nvJPEG is part of the full CUDA toolkit; where the
# toolkit at CUDA_HOME lacks it (a trimmed install), NVIDIA's wheel for the
# toolkit's major version (PyPI: nvidia-nvjpeg, its header and library, about
# 4 MB) is unpacked into DIR/include and DIR/lib. Nothing to do without a
# CUDA toolkit, or when the toolkit has nvJPEG or DIR already holds it.
# Exit 0 when nvJPEG is there (or not wanted), 1 when it could not be
# fetched (the build then leaves nvJPEG out and says so).
set -euo pipefail
cuda=$1
dir=$2
[ -x "$cuda/bin/nvcc" ] || exit 0
[ -f "$cuda/include/nvjpeg.h" ] && exit 0
major=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda/include/cuda.h" | head -1)
major=$((major / 1000))
[ -f "$dir/include/nvjpeg.h" ] && [ -e "$dir/lib/libnvjpeg.so.$major" ] && exit 0
if [ "$major" -ge 13 ]; then pkg="nvidia-nvjpeg==$major.*"; else pkg="nvidia-nvjpeg-cu$major"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! timeout 300 python3 -m pip download --quiet --no-deps --only-binary=:all: --timeout 20 --retries 2 \
    -d "$tmp" "$pkg" >&2; then
    echo "fetch_nvjpeg.sh: could not download $pkg from PyPI" >&2
    exit 1
fi
python3 -m zipfile -e "$tmp"/*.whl "$tmp/x"
hdr=$(find "$tmp/x" -name nvjpeg.h | head -1)
lib=$(find "$tmp/x" -name "libnvjpeg.so.$major" | head -1)
[ -n "$hdr" ] && [ -n "$lib" ] || { echo "fetch_nvjpeg.sh: $pkg holds no nvjpeg.h or libnvjpeg.so.$major" >&2; exit 1; }
mkdir -p "$dir/include" "$dir/lib"
cp "$hdr" "$dir/include/"
cp "$lib" "$dir/lib/"
ln -sf "libnvjpeg.so.$major" "$dir/lib/libnvjpeg.so"
echo "fetch_nvjpeg.sh: nvJPEG $(basename "$tmp"/*.whl) in $dir"
