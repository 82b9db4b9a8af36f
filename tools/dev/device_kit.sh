#!/usr/bin/env bash
# tools/dev/device_kit.sh - packs what a bare GPU machine needs to run this
# checkout's binaries and tests, for machines that can fetch nothing (the
# project's lent H100/H200 machines: CUDA, cuDNN and NCCL come with their
# PyTorch, but no OpenBLAS, cmocka, Open MPI or Fashion-MNIST).
#
#   tools/dev/device_kit.sh                     # here: builds (make test-build), packs, and the mutants (tools/dev/gpu_mutants.sh)
#   env: KIT_BASE, the commit to measure against (default HEAD~1; "none":
#        no second build): its trainer, built the same way, goes in the kit
#        for tools/dev/gpu_check.sh's A/B (tools/dev/bench_ab_gpu.sh)
#   then on the GPU machine, in the checkout, with .devkit carried:
#   tools/dev/gpu_check.sh (or: source tools/dev/device_env.sh, then run build/tests/... directly)
#
# Writes .devkit/ (ignored by git):
#   kit.tar.xz      the trainer and build/ (test binaries, tools, probes; no objects;
#                   device_env.sh makes `make` take them as up to date), and a
#                   root/ tree of shared libraries and Open MPI's runtime
#                   (binaries, plugins, help files, config) at the paths this
#                   Debian machine has them, which device_env.sh unpacks into
#                   / without replacing any file the machine already has;
#   fashion-mnist/  the data set, from /usr/share/datasets/fashion-mnist;
#   trainer.base.xz, trainer.base.rev  KIT_BASE's trainer and its commit.
# Left out: the C library, libstdc++ and libgcc_s (every machine has them)
# and the CUDA libraries (cudart, cuBLAS, cuDNN, NCCL), which the GPU
# machine's own are used for (device_env.sh puts them on LD_LIBRARY_PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
kit=$repo/.devkit
# Built from the working tree that travels (tracked and untracked files git
# does not ignore) in a copy, with code for any x86-64-v3 processor (AVX2,
# FMA, F16C) instead of this one's -march=native: the GPU machine's host
# processor is another. This checkout's own build is left alone.
src=$(mktemp -d) bsrc=$(mktemp -d)
trap 'rm -rf "$src" "$bsrc"' EXIT
git ls-files -co --exclude-standard -z | xargs -0 tar --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$src"
# nvJPEG that `make deps` fetched (ignored by git): the build links it by its
# path in the copy, and the library collection below carries it to that path
[ -d deps/nvjpeg ] && mkdir -p "$src/deps" && cp -a deps/nvjpeg "$src/deps/"
echo "device_kit: building in $src (OPT=-O3 -march=x86-64-v3)"
make -C "$src" -s -j"$(nproc)" OPT="-O3 -march=x86-64-v3" test-build
base=${KIT_BASE-HEAD~1}
base_rev=""
if [ "$base" != none ]; then
    base_rev=$(git rev-parse --short "$base^{commit}")
    git archive "$base_rev" | tar -xf - -C "$bsrc"
    echo "device_kit: building $base ($base_rev) in $bsrc, the A/B's old trainer"
    make -C "$bsrc" -s -j"$(nproc)" OPT="-O3 -march=x86-64-v3" trainer
fi
rm -rf "$kit"
mkdir -p "$kit/root"
cd "$src"
tests=(build/tests/* build/tools/*)

# Open MPI's runtime: everything its packages install, except documentation
files=()
for p in openmpi-bin openmpi-common libopenmpi3 libpmix2; do
    if dpkg -s "$p" >/dev/null 2>&1; then
        while IFS= read -r f; do
            [ -f "$f" ] || [ -L "$f" ] || continue
            case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
            files+=("$f")
        done < <(dpkg -L "$p")
    else
        echo "device_kit: package $p not installed here; multi-rank runs there need it" >&2
    fi
done

# shared libraries the binaries and Open MPI's plugins load, by ldd
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
elves=(./trainer "${tests[@]}")
[ -z "$base_rev" ] || elves+=("$bsrc/trainer")
for f in "${files[@]}"; do
    case "$f" in *.so | *.so.* | /usr/bin/*) [ -f "$f" ] && elves+=("$f") ;; esac
done
for e in "${elves[@]}"; do
    file -L "$e" 2>/dev/null | grep -q ELF || continue
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] && [ -n "$path" ] && [ -f "$path" ] || continue
        [[ "$name" =~ $skip ]] && continue
        files+=("$path")
    done < <(ldd "$e" 2>/dev/null)
done

# Each file under its /usr path (both machines merge /lib and /bin into
# /usr), as a plain copy of what it points to: a symbolic link here may lead
# through /etc/alternatives, which the GPU machine does not have.
printf '%s\n' "${files[@]}" | sed -E 's#^/(lib|lib64|bin|sbin)/#/usr/\1/#' | sort -u | while IFS= read -r f; do
    [ -e "$f" ] || continue
    mkdir -p "$kit/root$(dirname "$f")"
    cp -L "$f" "$kit/root$f"
done
find build -name '*.d' -delete # they name headers the GPU machine lacks
# objects and the static library stay here: the programs hold them, and
# device_env.sh's `make -t` takes the build as it is (the kit must fit the
# 64 MiB a device call carries)
tar -cJf "$kit/kit.tar.xz" --exclude='*.o' --exclude='*.a' trainer build -C "$kit" root
rm -rf "$kit/root"
if [ -n "$base_rev" ]; then
    xz -c "$bsrc/trainer" >"$kit/trainer.base.xz"
    echo "$base_rev" >"$kit/trainer.base.rev"
fi
if [ -d /usr/share/datasets/fashion-mnist ]; then
    # the test set whole, and the first 8192 training images: the GPU tests
    # take at most the first 4096 (data.train_limit, tests/test_gpu_train.sh),
    # and the whole set (26 MB) would not fit the 64 MiB a call carries
    mkdir -p "$kit/fashion-mnist"
    cp -a /usr/share/datasets/fashion-mnist/t10k-* "$kit/fashion-mnist/"
    python3 - /usr/share/datasets/fashion-mnist "$kit/fashion-mnist" 8192 <<'PY'
import gzip, struct, sys
src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, item in (("train-images-idx3-ubyte.gz", 28 * 28), ("train-labels-idx1-ubyte.gz", 1)):
    data = gzip.open(f"{src}/{name}").read()
    ndim = data[3]
    head = bytearray(data[:4 + 4 * ndim])
    count = struct.unpack(">I", head[4:8])[0]
    keep_n = min(keep, count)
    head[4:8] = struct.pack(">I", keep_n)
    with gzip.open(f"{dst}/{name}", "wb") as f:
        f.write(bytes(head) + data[len(head):len(head) + keep_n * item])
PY
else
    echo "device_kit: no /usr/share/datasets/fashion-mnist here (make deps installs it)" >&2
fi
"$repo/tools/dev/gpu_mutants.sh" | sed 's/^/device_kit: /'
du -sh "$kit"/* | sed 's/^/device_kit: /'
echo "device_kit: carry .devkit; on the GPU machine: tools/dev/gpu_check.sh (or source tools/dev/device_env.sh)"
