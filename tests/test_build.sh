#!/usr/bin/env bash
# tests/test_build.sh - the build a cluster user without root makes
# (docs/install.md), once, in a copy of the tree, as an unprivileged user:
#   - cuDNN and NCCL from NVIDIA's PyPI wheels (nvidia-cudnn-cu13 and
#     nvidia-nccl-cu13 in a virtual environment outside the repository:
#     $NV_VENV, default /opt/nv-venv) through CUDNN_HOME and NCCL_HOME, the
#     rest of the toolkit from CUDA_HOME;
#   - inih from a prefix of its own (INIH_ROOT: what a module provides), and
#     stb_image as its headers alone (STB_ROOT: compiled here);
#   - checked: the build's summary names each prefix (a prefix that is not
#     one is refused); the trainer is linked
#     to the wheels' and the prefix's files (ldd, through the rpath, no
#     LD_LIBRARY_PATH); --version says the wheels' versions were loaded and
#     built with; `make install PREFIX=...` gives a trainer that trains from
#     another directory with the installed config; the header-compiled
#     stb_image decodes a PNG exactly as Debian's libstb does.
# Needs the CUDA toolkit (nvcc), MPI and the venv; prints "SKIPPED: ..."
# without them (python3 -m venv /opt/nv-venv && /opt/nv-venv/bin/pip
# install nvidia-cudnn-cu13 nvidia-nccl-cu13: about 2 GB). Nothing here runs
# on a GPU. Run from the repository root after `make`. Takes about 3 minutes
# (nvcc, for one architecture).
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
venv=${NV_VENV:-/opt/nv-venv}
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -x "$cuda/bin/nvcc" ] || skip "no CUDA toolkit at $cuda"
site=$(ls -d "$venv"/lib/python3*/site-packages 2>/dev/null | head -1)
[ -n "$site" ] && [ -f "$site/nvidia/cudnn/include/cudnn.h" ] && [ -f "$site/nvidia/nccl/include/nccl.h" ] ||
    skip "no NVIDIA wheels in $venv (python3 -m venv $venv && $venv/bin/pip install nvidia-cudnn-cu13" \
        "nvidia-nccl-cu13, or set NV_VENV)"
command -v mpicc >/dev/null 2>&1 || skip "no mpicc"
command -v setpriv >/dev/null 2>&1 || skip "no setpriv (util-linux)"
wheel_version() { "$venv/bin/pip" show "$1" 2>/dev/null | sed -n 's/^Version: \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p'; }
cudnn_v=$(wheel_version nvidia-cudnn-cu13)
nccl_v=$(wheel_version nvidia-nccl-cu13)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
export OMP_NUM_THREADS=1

# The tree as git sees it (tracked and new files), and nvJPEG where make deps put it.
src="$tmp/src"
mkdir -p "$src"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src"
[ -d deps ] && cp -r deps "$src/"
# A prefix holding inih alone, and one holding stb_image's header alone.
inih="$tmp/inih"
mkdir -p "$inih/include" "$inih/lib"
cp /usr/include/ini.h "$inih/include/"
cp -P /usr/lib/x86_64-linux-gnu/libinih.so* "$inih/lib/"
stb="$tmp/stb"
mkdir -p "$stb/include/stb"
cp /usr/include/stb/stb_image.h /usr/include/stb/stb_image_write.h "$stb/include/stb/"
mkdir -p "$tmp/home"
chown -R nobody "$src" "$tmp/home"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$tmp/home" PATH="$PATH" "$@"; }

vars=(CUDNN_HOME="$site/nvidia/cudnn" NCCL_HOME="$site/nvidia/nccl" INIH_ROOT="$inih" STB_ROOT="$stb"
      NVCC_ARCH="-gencode arch=compute_90,code=sm_90")
as_user make -C "$src" "${vars[@]}" >"$tmp/build.log" 2>&1
rc=$?
check "make as an unprivileged user with cuDNN and NCCL from the wheels (rc=$rc)" test $rc -eq 0
[ $rc -eq 0 ] || grep -E -i -B2 "error" "$tmp/build.log" | cut -c1-300 | tail -20
check "the summary: cuDNN from the wheel" grep -q "✓ cuDNN from $site/nvidia/cudnn" "$tmp/build.log"
check "the summary: NCCL from the wheel" \
    grep -q "✓ NCCL from $site/nvidia/nccl" "$tmp/build.log"
check "the summary: the CUDA backend with NCCL" \
    grep -q "✓ CUDA backend (toolkit + cuDNN + cuBLAS) with NCCL" "$tmp/build.log"
check "the summary: inih from its prefix" grep -q "✓ inih (config reader) from $inih" "$tmp/build.log"
check "the summary: stb_image compiled from its header" \
    grep -q "✓ stb_image (PNG, BMP, GIF) from $stb - compiled here from its header" "$tmp/build.log"

t="$src/trainer"
ld=$(env -u LD_LIBRARY_PATH ldd "$t" 2>&1)
check "linked to the wheel's libcudnn.so.9 (rpath)" \
    grep -q "libcudnn.so.9 => $site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$ld"
check "linked to the wheel's libnccl.so.2 (rpath)" grep -q "libnccl.so.2 => $site/nvidia/nccl/lib/libnccl.so.2" <<<"$ld"
check "linked to the prefix's libinih (rpath)" grep -q "libinih.so.1 => $inih/lib/libinih.so.1" <<<"$ld"
check "no library missing" bash -c "! grep -q 'not found' <<<\"\$1\"" _ "$ld"
ver=$("$t" --version 2>&1)
echo "$ver" | sed -n '/^libraries/,$p'
check "--version: cuDNN $cudnn_v loaded and built with, from the wheel" \
    grep -q "cuDNN $cudnn_v (built with $cudnn_v): $site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$ver"
check "--version: NCCL $nccl_v loaded and built with, from the wheel" \
    grep -q "NCCL $nccl_v (built with $nccl_v): $site/nvidia/nccl/lib/libnccl.so.2" <<<"$ver"

# A mistyped prefix is refused, naming it, not quietly replaced by the system's library.
out=$(as_user make -C "$src" "${vars[@]}" INIH_ROOT="$tmp/no-such-prefix" 2>&1)
rc=$?
check "a prefix that is not one: refused (rc=$rc), naming the variable" \
    grep -q "INIH_ROOT=$tmp/no-such-prefix: no include/ folder there" <<<"$out"

# make install, then a run from elsewhere with the installed config.
inst="$tmp/inst"
mkdir -p "$inst" && chown nobody "$inst"
as_user make -C "$src" "${vars[@]}" install PREFIX="$inst" >"$tmp/install.log" 2>&1
rc=$?
check "make install PREFIX=... as the same user (rc=$rc)" test $rc -eq 0
check "installed: bin/trainer, the tools, configs, docs" test -x "$inst/bin/trainer" -a \
    -x "$inst/libexec/cnntrain/make_shards" -a -f "$inst/share/cnntrain/configs/resnet101.ini" -a \
    -f "$inst/share/doc/cnntrain/install.md"
mkdir -p "$tmp/elsewhere" && chown nobody "$tmp/elsewhere"
out=$(cd "$tmp/elsewhere" && as_user "$inst/bin/trainer" "$inst/share/cnntrain/configs/resnet20-fashion.ini" \
    train.device=cpu data.train_limit=32 data.test_limit=32 train.batch_size=16 train.epochs=1 train.log_every=1 \
    train.threads=1 data.workers=1 train.out_dir=run 2>&1)
rc=$?
check "the installed trainer trains an epoch of 2 steps from another directory (rc=$rc)" \
    grep -q "finished: 2 steps" <<<"$out"
check "its run directory is where it was asked, relative to that directory" test -f "$tmp/elsewhere/run/metrics.jsonl"

# stb_image compiled from its header decodes as Debian's libstb: one PNG through both builds' render_image.
build/tools/to_imagefolder idx /usr/share/datasets/fashion-mnist "$tmp/png" --limit 10 >/dev/null 2>&1
png=$(find "$tmp/png/train" -name '*.png' | head -1)
if [ -n "$png" ]; then
    build/tools/render_image "$png" "$tmp/a.pgm" --resize 20 20 --grey >/dev/null 2>&1
    "$inst/libexec/cnntrain/render_image" "$png" "$tmp/b.pgm" --resize 20 20 --grey >/dev/null 2>&1
    check "a PNG decoded by the header-compiled stb_image equals Debian's libstb's" cmp -s "$tmp/a.pgm" "$tmp/b.pgm"
    check "and it is an image (PGM)" grep -q "^P5" "$tmp/b.pgm"
else
    echo "SKIPPED (part): no Fashion-MNIST to make a PNG from"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all build checks passed"
