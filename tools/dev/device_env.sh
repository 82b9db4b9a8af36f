# tools/dev/device_env.sh - sourced on a bare GPU machine, in the checkout, with
# .devkit (made by tools/dev/device_kit.sh) carried along:
#
#   source tools/dev/device_env.sh && build/tests/test_backend_gpu
#
# Unpacks the prebuilt trainer and build/ into the checkout (run them
# directly: `make` cannot build there, the machine has no OpenBLAS, cmocka or
# MPI headers), installs the kit's libraries and Open MPI files at their
# paths without replacing any file already there, puts Fashion-MNIST where
# the configs look for it, finds the machine's own CUDA libraries (cuBLAS,
# cuDNN and NCCL come with its PyTorch) for the loader, and sets what Open
# MPI needs to run as root. Prints what it found; returns non-zero when
# something is missing.
cnt_device_env() {
    local kit=.devkit tmp f
    [ -f "$kit/kit.tar.xz" ] || { echo "device_env: no $kit/kit.tar.xz (run tools/dev/device_kit.sh here and carry $kit)" >&2; return 1; }
    tmp=$(mktemp -d) || return 1
    tar -xJf "$kit/kit.tar.xz" -C "$tmp" || return 1
    rm -rf build trainer
    mv "$tmp/build" "$tmp/trainer" . || return 1
    # never replace a file of the machine's: its own versions of a library win
    (cd "$tmp/root" && find . -type f) | while IFS= read -r f; do
        f=${f#./}
        [ -e "/$f" ] || install -D -m "$(stat -c %a "$tmp/root/$f")" "$tmp/root/$f" "/$f"
    done
    rm -rf "$tmp"
    for f in mpirun mpiexec; do
        [ -e /usr/bin/$f ] || ln -s $f.openmpi /usr/bin/$f
    done
    if [ -d "$kit/fashion-mnist" ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
        mkdir -p /usr/share/datasets && cp -a "$kit/fashion-mnist" /usr/share/datasets/
    fi
    ldconfig 2>/dev/null
    # the CUDA libraries the trainer was linked against, wherever this machine
    # has them: its PyTorch's first, so that tools/bench_gpu.sh compares the
    # two programs on one cuDNN (and PyTorch, which checks its cuDNN's
    # version, does not find an older one first on LD_LIBRARY_PATH)
    local dirs="" lib d torchnv
    torchnv=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia"))' 2>/dev/null)
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
        d=$( ([ -n "$torchnv" ] && [ -d "$torchnv" ] && find "$torchnv" -name "$lib" 2>/dev/null;
              ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}';
              find /usr/local/cuda/lib64 /usr/local/cuda/targets /opt /usr/lib /usr/local/lib -name "$lib" 2>/dev/null) |
            head -1)
        if [ -z "$d" ]; then
            echo "device_env: $lib not found on this machine" >&2
            continue
        fi
        d=$(dirname "$d")
        case ":$dirs:" in *":$d:"*) ;; *) dirs="$dirs:$d" ;; esac
    done
    export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # the build is the kit's; run its programs and test scripts directly: `make`
    # would probe for OpenBLAS, cmocka and MPI's headers, which this machine lacks
    echo "device_env: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    if ! ldd ./trainer | grep 'not found'; then
        echo "device_env: the trainer's libraries all resolve"
    else
        return 1
    fi
    ./trainer --devices
}
cnt_device_env
