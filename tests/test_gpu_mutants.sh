#!/usr/bin/env bash
# tests/test_gpu_mutants.sh - the GPU mutants (tools/dev/gpu_mutants.sh) still
# apply to this tree: each one's sed changes exactly one line of its file, as
# tools/dev/device_kit.sh requires before a lent GPU machine's visit (a code
# change that moved a guarded line, or made a second line match, would
# otherwise surface only there). And the check fails, naming the mutant and
# the file, on a tree where one of them matches twice. Needs no GPU; builds
# nothing.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
out=$(tools/dev/gpu_mutants.sh --check 2>&1)
rc=$?
check "every mutant's edit changes one line of this tree (rc=$rc)" test $rc -eq 0
check "... and says how many mutants: $out" grep -qE '^gpu_mutants: [0-9]+ mutants, each edit changes one line' \
    <<<"$out"
# a tree where the bias kernel's guarded line is there twice
mkdir -p "$tmp/tree"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$tmp/tree"
line=$(grep -m1 -n '^    const float bc = b\[c\];' "$tmp/tree/model/cuda_kernels.cu" | cut -d: -f1)
sed -i "${line}p" "$tmp/tree/model/cuda_kernels.cu"
out=$(tools/dev/gpu_mutants.sh --check "$tmp/tree" 2>&1)
rc=$?
check "a line matched twice: rc 1 (rc=$rc)" test $rc -eq 1
check "... naming the mutant and the file" grep -q \
    "gpu_mutants: bias_nhwc_one_channel: the edit changed 2 lines of model/cuda_kernels.cu, not 1" <<<"$out"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
