#!/usr/bin/env bash
# tests/san_dist.sh - the threads a distributed run starts, under a
# sanitizer (make test-sanitize; not part of make test): dist/'s ring, its
# buckets in flight and its watchdog under mpirun (tests/mpi_ring), and the
# trainer in 2 ranks, whose loader threads, communication thread and stall
# monitor run beside its steps: with the ring (2 buckets in flight,
# checkpoints), MPI_Allreduce with fp16 compression, the ring with PowerSGD,
# a parameter server, the hierarchical allreduce (with the timeline and
# TensorBoard files), and from a folder of JPEGs. Each run must exit 0 with
# no sanitizer report on stderr.
# Run by tests/run_tests.sh from `make test-sanitize`: CNT_SAN_BUILD names
# the sanitized build folder (its trainer and tests/mpi_ring).
set -u
B=${CNT_SAN_BUILD:?set by make test-sanitize}
if ! command -v mpirun > /dev/null; then echo "SKIPPED: mpirun not found"; exit 0; fi
if ! grep -q 'MPI=1' "$B/config.sig" 2> /dev/null; then echo "SKIPPED: built without MPI (MPI=0)"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's leaks (tests/support/lsan.supp) are recognised by their
# libraries only in whole stacks, and with its plug-ins still loaded at exit
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1
# san NAME LIMIT COMMAND...: under mpirun -np 2; exit 0 and no report
san() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS -x ASAN_OPTIONS -x UBSAN_OPTIONS \
        -x LSAN_OPTIONS -x TSAN_OPTIONS -x OMPI_MCA_mca_base_component_disable_dlclose "$@" \
        > "$tmp/$name.out" 2> "$tmp/$name.err"
    local rc=$?
    local reports
    local said='^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: |SUMMARY: UndefinedBehaviorSanitizer)|runtime error:'
    reports=$(grep -cE "$said" "$tmp/$name.err")
    check "$name: exit 0 (rc=$rc), no sanitizer report ($reports)" test "$rc" -eq 0 -a "$reports" -eq 0
    if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ]; then
        grep -E -A12 'WARNING: ThreadSanitizer|ERROR: |runtime error:' "$tmp/$name.err" | head -n 40 | sed 's/^/    /'
        tail -n 3 "$tmp/$name.out" | sed 's/^/    /'
    fi
}
san "mpi_ring, 2 ranks" 900 "$B/tests/mpi_ring"
C=(configs/resnet20-fashion.ini data.train_limit=256 data.test_limit=100 train.batch_size=32 train.epochs=2
   train.threads=1 data.workers=2 dist.stall_warn_s=30 dist.stall_abort_s=300)
san "trainer, ring, 2 buckets in flight, checkpoints" 900 "$B/trainer" "${C[@]}" dist.backend=ring \
    dist.bucket_mb=0.25 dist.buckets_in_flight=2 checkpoint.every_steps=3 train.out_dir="$tmp/ring"
san "trainer, MPI_Allreduce, fp16 compression" 900 "$B/trainer" "${C[@]}" dist.backend=mpi dist.compress=fp16 \
    train.out_dir="$tmp/mpi"
san "trainer, ring, PowerSGD (buckets cutting tensors)" 900 "$B/trainer" "${C[@]}" dist.backend=ring \
    dist.compress=powersgd dist.powersgd_start=2 dist.bucket_mb=0.05 dist.first_bucket_mb=0.05 train.out_dir="$tmp/psgd"
san "trainer, a parameter server" 900 "$B/trainer" "${C[@]}" dist.mode=ps dist.ps_servers=1 train.out_dir="$tmp/ps"
san "trainer, hierarchical allreduce, timeline, TensorBoard" 900 "$B/trainer" "${C[@]}" dist.backend=hier \
    dist.timeline="$tmp/hier/timeline.json" train.tensorboard=true train.out_dir="$tmp/hier"
# JPEGs decoded by the loader's threads, resized and cropped on the way
"$B/tools/to_imagefolder" synthetic "$tmp/jpg" --classes 4 --train 96 --val 32 --size 60x45 > /dev/null 2>&1
check "to_imagefolder synthetic: exit 0" test $? -eq 0
san "trainer, a JPEG folder, 2 loader threads" 900 "$B/trainer" "${C[@]}" data.kind=imagefolder data.root="$tmp/jpg" \
    data.image_size=32 data.channels=3 data.crop=resized train.batch_size=16 train.out_dir="$tmp/jpgrun"
[ "$fails" -eq 0 ] && echo "all sanitized distributed runs passed"
exit "$fails"
