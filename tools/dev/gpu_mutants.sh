#!/usr/bin/env bash
# tools/dev/gpu_mutants.sh - GPU test programs built from copies of this tree with
# one fence, event wait or copy removed each, for tools/dev/gpu_check.sh to run on a
# lent GPU machine and expect to FAIL: a test that still passes without the
# ordering it guards does not guard it. tools/dev/device_kit.sh calls this last.
#
#   tools/dev/gpu_mutants.sh        # writes .devkit/mutants.tar.xz (carried with the kit)
#   tools/dev/gpu_mutants.sh --check [ROOT]   # only checks that each edit changes exactly
#                                   # one line of ROOT's files (default: this tree), no build
#                                   # (tests/test_gpu_mutants.sh, in make test)
#
# Each mutant: a name, the file edited, a sed expression that must change
# exactly one line of it (no '|' in it: the fields are split on '|'), the
# test program rebuilt from the edited tree, and the cmocka test that guards
# the line (CNT_TEST_FILTER; '-' for a program gpu_check runs whole). The
# archive holds one program per mutant and mutants.list ("NAME PROGRAM
# FILTER" a line): one solid xz, since the programs differ in a few bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$PWD/.devkit/mutants
archive=$PWD/.devkit/mutants.tar.xz
mutants=(
    # the stager's three fence pairings (tests/test_stager.c, test_stager_gpu_stress)
    'stager_no_released|train/stager.c|s/s->released\[k\], NULL);/NULL, NULL);/|build/tests/test_stager|-'
    'stager_no_host_wait|train/stager.c|s/^\( *\)be->fence_wait(s->uploaded\[k\]);/\1(void)s;/|build/tests/test_stager|-'
    'stager_no_compute_wait|model/backend_cuda.c|s/CUDA_CHECK(cudaStreamWaitEvent(g.stream, (cudaEvent_t)done, 0));/(void)0;/|build/tests/test_stager|-'
    # NCCL's two event waits (tests/mpi_nccl.c at 2 ranks)
    'nccl_no_ready|dist/nccl.c|s/CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->ready, 0));/(void)0;/|build/tests/mpi_nccl|-'
    'nccl_no_done|dist/nccl.c|s/CUDA_CHECK(cudaStreamWaitEvent(cs, c->done, 0));/(void)0;/|build/tests/mpi_nccl|-'
    # dist.compress = fp16 through NCCL: the sums of the halves never widened back (tests/mpi_nccl.c)
    'nccl_fp16_no_widen|dist/nccl.c|s/        CUDA_CHECK(cuk_widen(c->stream, BACKEND_MATH_FP16, n, half, buf, 0));/        (void)0;/|build/tests/mpi_nccl|-'
    # PowerSGD through NCCL: the compute stream not waiting for a sum before the arithmetic that reads it
    # (tests/mpi_nccl.c, test_powersgd_paths); the Gram-Schmidt kernel's columns not normalised
    # (test_backend_gpu, test_lowrank_ops)
    'psgd_nccl_no_wait|dist/reducer_nccl.c|s/^    dist_nccl_wait(c->nccl, c->stream);/    (void)0;/|build/tests/mpi_nccl|-'
    'lowrank_not_normalised|model/cuda_kernels.cu|s/        float inv = s > 0.0 ? (float)(1.0 \/ sqrt(s)) : 0.0f;/        float inv = s > 0.0 ? 1.0f : 0.0f;/|build/tests/test_backend_gpu|test_lowrank_ops'
    # the kept filters reused under another weights epoch (test_backend_gpu, test_conv_filter_cache)
    'fcache_no_forget|model/backend_cuda.c|s/        same = same \&\& e->epoch == ctx->weights_epoch;/        (void)0;/|build/tests/test_backend_gpu|test_conv_filter_cache'
    # NHWC batch norm's aligned stand-ins not copied back (test_backend_gpu, test_bn_nhwc_unaligned)
    'bn_no_copy_back|model/backend_cuda.c|s/if (s != v) CUDA_CHECK(cudaMemcpyAsync(v, s,/if (0) CUDA_CHECK(cudaMemcpyAsync(v, s,/|build/tests/test_backend_gpu|test_bn_nhwc_unaligned'
    # 16-bit activations: a convolution widening its 16-bit output over itself, pooling reading 16-bit
    # values as floats, batch norm's cuDNN descriptor saying fp32 for 16-bit data (test_backend_gpu,
    # test_act16_ops)
    'act16_conv_widens|model/backend_cuda.c|s/    if (math_reduced(math) \&\& !a16) CUDA_CHECK(cuk_widen(g.stream, math, conv_out_count(p), ys, y, 0));/    if (math_reduced(math)) CUDA_CHECK(cuk_widen(g.stream, math, conv_out_count(p), ys, y, 0));/|build/tests/test_backend_gpu|test_act16_ops'
    'act16_pool_reads_fp32|model/cuda_kernels.cu|s/^\( *\)type, (T \*)y, nhwc, arg));/\1BACKEND_DTYPE_FP32, (T *)y, nhwc, arg));/|build/tests/test_backend_gpu|test_act16_ops'
    # batch norm's fused forward followed by the composition as well, which updates the running statistics
    # a second time: caught only when the fused cuDNN call runs (test_backend_gpu, test_bn_act_fused; not
    # caught means cuDNN refused it and the composition ran alone)
    'bn_fused_twice|model/backend_cuda.c|/eps, save_mean, save_invstd, ws, kept ? keep->p : g.bn_reserve,$/{n;n;n;s/return;/(void)0;/}|build/tests/test_backend_gpu|test_bn_act_fused'
    # the fused forward keeping the ReLU's mask without saying so (the backward composes), and the fused
    # backward told there is no add (dz left unwritten) (test_backend_gpu, test_bn_act_fused)
    'bn_keep_unmarked|model/backend_cuda.c|s/                if (kept) keep->written = 1;/                (void)kept;/|build/tests/test_backend_gpu|test_bn_act_fused'
    'bn_bwd_fused_no_dz|model/backend_cuda.c|s/        const cudnnBatchNormOps_t ops = bn_fused_ops(dz != NULL);/        const cudnnBatchNormOps_t ops = bn_fused_ops(0);/|build/tests/test_backend_gpu|test_bn_act_fused'
    # the vectorised elementwise kernels' last values (n % 4 floats, n % 8 16-bit ones) left out
    # (test_backend_gpu, test_relu)
    'vec_relu_tail_short|model/cuda_kernels.cu|s/    GRID_STRIDE(t, n - nv) { size_t i = nv + t; st(y, i, relu_of(ld(x, i))); }/    GRID_STRIDE(t, n - nv - (n > nv)) { size_t i = nv + t; st(y, i, relu_of(ld(x, i))); }/|build/tests/test_backend_gpu|test_relu'
    # the graph API's operations given alpha as beta: every output adds to its old contents
    # (test_backend_gpu, test_conv_graph_api; not caught means no graph plan ran)
    'graph_beta_one|model/cudnn_graph.c|s/    TRY(st, set_attr(op, a\[5\], CUDNN_TYPE_FLOAT, 1, \&beta));/    TRY(st, set_attr(op, a[5], CUDNN_TYPE_FLOAT, 1, \&alpha));/|build/tests/test_backend_gpu|test_conv_graph_api'
    # max pooling's kept positions of the maxima: the forward not saying it kept them, the backward reading
    # a keep its forward did not write (test_backend_gpu, test_pool_fwd_bwd)
    'pool_keep_unmarked|model/backend_cuda.c|s/    if (arg) keep->written = 1;/    (void)0;/|build/tests/test_backend_gpu|test_pool_fwd_bwd'
    'pool_keep_read_unwritten|model/backend_cuda.c|s/keep \&\& keep->written \&\& need <= keep->bytes/keep \&\& keep->p \&\& need <= keep->bytes/|build/tests/test_backend_gpu|test_pool_fwd_bwd'
    # a kept graph-API choice taken without checking that its engine is still at its place in the
    # heuristics' list (test_backend_gpu, test_conv_graph_plans_kept)
    'graph_take_any_engine|model/cudnn_graph.c|s/    } else if (!qualifies(cfgs\[index\], cv->math, \&at) .. at != engine) {/    } else if (!qualifies(cfgs[index], cv->math, \&at)) {/|build/tests/test_backend_gpu|test_conv_graph_plans_kept'
    # max pooling's backward by output where windows tile the input: the gradient sent to each window's
    # first element instead of its maximum (test_backend_gpu, test_pool_fwd_bwd: its VGG rows)
    'pool_tile_first_element|model/cuda_kernels.cu|s/                st(dx, i, pr_tile_grad(a \* p.S + b, at, d, acc ? ld(dx, i) : 0.0f));/                st(dx, i, pr_tile_grad(a * p.S + b, 0, d, acc ? ld(dx, i) : 0.0f));/|build/tests/test_backend_gpu|test_pool_fwd_bwd'
    # the bias forward's NHWC kernel adding channel 0's bias everywhere (test_backend_gpu,
    # test_bias_fwd_bwd_nhwc)
    'bias_nhwc_one_channel|model/cuda_kernels.cu|s/^    const float bc = b\[c\];/    const float bc = b[0];/|build/tests/test_backend_gpu|test_bias_fwd_bwd_nhwc'
    # a recorded round's timing events recorded as plain records, which only order the capture: no replay
    # records them (tests/mpi_nccl.c, test_recorded_rounds)
    'nccl_record_internal|dist/nccl.c|s/    if (c->recording >= 0) CUDA_CHECK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));/    if (0) CUDA_CHECK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));/|build/tests/mpi_nccl|-'
    # the vectorised NHWC bias gradient adding all of a vector's channels into its first (test_backend_gpu,
    # test_bias_fwd_bwd_nhwc: its fp32 rows of 16 and 64 channels)
    'bias_bwd_vec_one_lane|model/cuda_kernels.cu|s/            for (int k = 0; k < V; k++) s\[k\] += (double)widen(a.e\[k\]);/            for (int k = 0; k < V; k++) s[0] += (double)widen(a.e[k]);/|build/tests/test_backend_gpu|test_bias_fwd_bwd_nhwc'
    # dropout_mask_at's kernel mixing in the node but not the step seed read from the device word
    # (test_backend_gpu, test_dropout_mask_bitwise)
    'dropout_at_no_step|model/cuda_kernels.cu|s/    uint64_t seed = rng_hash_dropout_seed(\*step_at, node_index);/    uint64_t seed = rng_hash_dropout_seed(0, node_index);/|build/tests/test_backend_gpu|test_dropout_mask_bitwise'
    # the NHWC bias gradient's 16-byte loads taken without checking dy's alignment (test_backend_gpu,
    # test_bias_fwd_bwd_nhwc: dy one float past a 16-byte boundary faults) and with 4-value vectors
    # whatever the type (test_act16_ops: 12 16-bit channels)
    'bias_bwd_vec_unaligned|model/cuda_kernels.cu|s/    if (nhwc \&\& C % V == 0 \&\& aligned16(dy, NULL, NULL)) {/    if (nhwc \&\& C % V == 0) {/|build/tests/test_backend_gpu|test_bias_fwd_bwd_nhwc'
    'bias_bwd_vec_of_four|model/cuda_kernels.cu|s/    WITH_TYPE(type, V = kVec<T>);/    V = 4;/|build/tests/test_backend_gpu|test_act16_ops'
    # LARS: the trust ratio not applied, and sumsq2 leaving out its last block's sums (test_backend_gpu,
    # test_sgd_update and test_lars_ops)
    'lars_scale_ignored|model/cuda_kernels.cu|s/^    const float sc = scale_at ? \*scale_at : 1.0f;/    const float sc = 1.0f;/|build/tests/test_backend_gpu|test_sgd_update'
    'sumsq2_last_block|model/cuda_kernels.cu|s/^    for (int k = 0; k < G; k++) {/    for (int k = 0; k < G - (G > 1); k++) {/|build/tests/test_backend_gpu|test_lars_ops'
    'act16_bn_fp32_desc|model/backend_cuda.c|s/act16(ctx) ? conv_data_type(ctx->math) : CUDNN_DATA_FLOAT, N, C, HW, 1));/CUDNN_DATA_FLOAT, N, C, HW, 1));/|build/tests/test_backend_gpu|test_act16_ops'
)
# the edit of mutant NAME to PATH (in place, the original left in PATH.orig), which must change
# exactly one line, or a message naming FILE and exit 1
edit() { # edit NAME PATH EXPR FILE
    cp "$2" "$2.orig"
    sed -i "$3" "$2"
    changed=$(diff "$2.orig" "$2" | grep -c '^<' || true)
    if [ "$changed" -ne 1 ]; then
        echo "gpu_mutants: $1: the edit changed $changed lines of $4, not 1 (the code moved on?)" >&2
        exit 1
    fi
}
fields() { # fields MUTANT: sets name file expr prog filter, or a message and exit 1
    IFS='|' read -r name file expr prog filter <<<"$1"
    if [ -z "$filter" ]; then
        echo "gpu_mutants: $name: no test filter field (the sed expression has a '|'?)" >&2
        exit 1
    fi
}
if [ "${1:-}" = --check ]; then
    root=${2:-$PWD}
    chk=$(mktemp -d)
    trap 'rm -rf "$chk"' EXIT
    for m in "${mutants[@]}"; do
        fields "$m"
        cp "$root/$file" "$chk/f"
        edit "$name" "$chk/f" "$expr" "$file"
    done
    echo "gpu_mutants: ${#mutants[@]} mutants, each edit changes one line"
    exit 0
fi
opt="-O3 -march=x86-64-v3" # as tools/dev/device_kit.sh: any x86-64-v3 host
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
# --ignore-failed-read: a tracked file deleted in the work tree is not there to copy
git ls-files -co --exclude-standard -z | xargs -0 tar --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$src"
rm -rf "$out" "$archive"
mkdir -p "$out"
make -C "$src" -s -j"$(nproc)" OPT="$opt" build/tests/test_stager build/tests/mpi_nccl \
    build/tests/test_backend_gpu
for m in "${mutants[@]}"; do
    fields "$m"
    edit "$name" "$src/$file" "$expr" "$file"
    make -C "$src" -s OPT="$opt" "$prog"
    cp "$src/$prog" "$out/$name"
    echo "$name $(basename "$prog") $filter" >>"$out/mutants.list"
    mv "$src/$file.orig" "$src/$file"
    touch "$src/$file"
done
tar -C "$out" -cf - . | xz -9 -T0 >"$archive"
rm -rf "$out"
echo "gpu_mutants: ${#mutants[@]} mutants in $archive ($(du -h "$archive" | cut -f1))"
