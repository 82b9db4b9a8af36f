#!/usr/bin/env bash
# tests/test_resume.sh - lose nothing: runs stopped every way a run can stop
# (train.max_steps inside an epoch, kill -9 at random moments, SIGTERM and
# SIGUSR1 at 1 and 2 ranks, during a step or an evaluation or to one rank
# at the epoch's end, a full disk, with and without gradient accumulation)
# and resumed with
# checkpoint.resume = auto give the losses of an uninterrupted run bit for
# bit (CPU), and metrics.jsonl holds each step once; a resume at another
# world size keeps the schedule and the epochs; a resume may not change the
# model, and a resume whose inputs are normalised otherwise (data.mean = auto
# on other data) says so with the values that continue the run; a rollback or a fresh start moves newer checkpoints aside instead of
# overwriting them, and auto then picks the latest run's.
# Every run is small (256 Fashion-MNIST images, batch 16: 16 steps an epoch
# on one rank) and bounded by timeout. Run from the repository root after `make`.
set -u
tmp=$(mktemp -d)
cleanup() {
    if [ -n "${mnt:-}" ]; then umount "$mnt" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
T=(timeout 120 ./trainer configs/resnet20-fashion.ini train.device=cpu data.train_limit=256 data.test_limit=100
   train.batch_size=16 train.epochs=2 train.log_every=1 train.threads=1 data.workers=1 optim.lr=0.05)

# The step records "step loss lr" of a metrics.jsonl, one per line.
steps() {
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "step": print(r["step"], r["loss"], r["lr"])' "$1"
}
# Whether every step 1..N appears exactly once, in order.
each_step_once() {
    local n
    n=$(steps "$1" | wc -l)
    test "$(steps "$1" | awk '{print $1}' | tr '\n' ' ')" = "$(seq 1 "$n" | tr '\n' ' ')"
}

# The reference: one uninterrupted run.
"${T[@]}" train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1
check "reference run exits 0" test $? -eq 0
steps "$tmp/ref/metrics.jsonl" >"$tmp/ref.steps"
check "reference run: 32 step records" test "$(wc -l <"$tmp/ref.steps")" -eq 32

# 1. train.max_steps inside an epoch: said, saved, resumed exactly.
out=$("${T[@]}" train.out_dir="$tmp/ms" train.max_steps=11 checkpoint.every_steps=5 2>&1)
check "max_steps inside an epoch: exit 0" test $? -eq 0
check "max_steps inside an epoch: the last line says where it stopped" \
    grep -q "stopped (train.max_steps = 11 reached 11 of 16 steps into an epoch" <<<"$out"
check "max_steps inside an epoch: a checkpoint at step 11" test -f "$tmp/ms/checkpoints/ckpt-000000-0000000176.cnt"
out=$("${T[@]}" train.out_dir="$tmp/ms" checkpoint.resume=auto checkpoint.every_steps=5 2>&1)
check "max_steps resume: exit 0" test $? -eq 0
check "max_steps resume: resumed 176 samples into epoch 1" \
    grep -q "resumed from .*ckpt-000000-0000000176.cnt: 0 epochs and 176 samples of epoch 1 (step 11 of its 16)" <<<"$out"
check "max_steps resume: the changed key is named" grep -q "keys changed since the checkpoint: train.max_steps 11 -> 0" <<<"$out"
check "max_steps resume: the same data, the same normalisation: no warning" \
    bash -c '! grep -q "resume: this run normalises" <<<"$1"' _ "$out"
check "max_steps resume: losses and lrs equal the uninterrupted run's" diff "$tmp/ref.steps" <(steps "$tmp/ms/metrics.jsonl")
check "max_steps resume: each step once in metrics.jsonl" each_step_once "$tmp/ms/metrics.jsonl"
# the first record describes the run; "time" and "images" go on across the resume and end where the
# uninterrupted run's do (images exactly; time within its own run's length)
check "max_steps resume: a run record first, time and images carried across the resume" python3 - \
    "$tmp/ms/metrics.jsonl" "$tmp/ref/metrics.jsonl" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
assert rs[0]["kind"] == "run" and rs[0]["model"] == "resnet20" and rs[0]["global_batch"] == 16, rs[0]
assert rs[0]["steps_per_epoch"] == 16 and rs[0]["mode"] == "allreduce" and len(rs[0]["config_hash"]) == 16, rs[0]
assert [r["kind"] for r in rs].count("run") == 2, "one run record per process"
timed = [r for r in rs if r["kind"] in ("step", "eval", "epoch")]
t = [r["time"] for r in timed]
im = [r["images"] for r in timed]
assert all(b >= a for a, b in zip(t, t[1:])), f"time goes back: {t}"
assert all(b >= a for a, b in zip(im, im[1:])), f"images go back: {im}"
steps = [r for r in rs if r["kind"] == "step"]
assert [r["images"] for r in steps] == [16 * r["step"] for r in steps], [r["images"] for r in steps]
last = [r for r in ref if r["kind"] == "eval"][-1]
assert timed[-1]["images"] == last["images"] == 512, (timed[-1], last)
PY
check "max_steps resume: the earlier run's config is kept beside config.ini ($(ls "$tmp/ms" | tr '\n' ' '))" \
    test "$(ls "$tmp/ms" | grep -c '^config\.[0-9-]*\.ini$')" -eq 1 -a -f "$tmp/ms/config.ini"

# 2. kill -9 at random moments, resume = auto until done: at most
# checkpoint.every_steps steps lost each time, the curve whole.
every=3
dir="$tmp/k9"
done_=0
lost_ok=1
for try in $(seq 1 40); do
    "${T[@]}" train.out_dir="$dir" checkpoint.resume=auto checkpoint.every_steps=$every >"$tmp/k9.$try.log" 2>&1 &
    pid=$!
    sleep "$(python3 -c "import random; print(round(random.uniform(0.7, 2.0), 2))")"
    if pkill -KILL -P $pid; then # the trainer: $pid is its timeout
        wait $pid 2>/dev/null
        # the last step logged before the kill; the next run's start must be within $every of it
        last=$(grep -o 'step [0-9]*/' "$tmp/k9.$try.log" | tail -1 | tr -dc 0-9)
        echo "  kill -9 number $try after step ${last:-0}"
        lastk[$try]=${last:-0}
    else
        wait $pid
        rc=$?
        done_=1
        break
    fi
done
check "kill -9 loop: a run got to the end (exit ${rc:-none} after $try tries)" test "$done_" -eq 1 -a "${rc:-1}" -eq 0
check "kill -9 loop: losses and lrs equal the uninterrupted run's" diff "$tmp/ref.steps" <(steps "$dir/metrics.jsonl")
check "kill -9 loop: each step once in metrics.jsonl" each_step_once "$dir/metrics.jsonl"
# the killed runs' records past their checkpoints are kept: each resume that
# says it moved N records after step S has them, all past S, in its own file
redone_ok=1 redone_files=0
for ((k = 2; k <= try; k++)); do
    said=$(grep -o 'metrics.jsonl: [0-9]* records\? after step [0-9]* .* moved to [^ ]*' "$tmp/k9.$k.log") || continue
    n=$(cut -d' ' -f2 <<<"$said") s=$(cut -d' ' -f6 <<<"$said") f=${said##* }
    redone_files=$((redone_files + 1))
    case "$f" in "$dir"/metrics.redone-*.jsonl) ;; *) redone_ok=0 ;; esac
    [ -f "$f" ] && [ "$(wc -l <"$f")" -eq "$n" ] && steps "$f" | awk -v s="$s" '$1 <= s {bad = 1} END {exit bad}' ||
        redone_ok=0
done
check "kill -9 loop: the records past each checkpoint kept ($redone_files files, $(ls "$dir" | grep -c '^metrics\.redone-') there)" \
    test "$redone_ok" -eq 1 -a "$(ls "$dir" | grep -c '^metrics\.redone-')" -eq "$redone_files"
# each resume started at most $every steps before the last step the killed run logged
for ((k = 2; k <= try; k++)); do
    from=$(grep -o 'and [0-9]* steps done' "$tmp/k9.$k.log" | tr -dc 0-9)
    prev=${lastk[$((k - 1))]:-0}
    if [ -n "$from" ] && [ $((prev - from)) -gt $every ]; then lost_ok=0; echo "  run $k resumed at step $from after step $prev"; fi
done
check "kill -9 loop: no resume lost more than checkpoint.every_steps = $every steps" test $lost_ok -eq 1

# 3. SIGTERM (1 rank): saved at the next step, exit 75, resumed exactly.
"${T[@]}" train.out_dir="$tmp/st" >"$tmp/st.log" 2>&1 &
pid=$!
wait_for_step() { # wait_for_step LOG N: until LOG shows step N (at most 60 s)
    for _ in $(seq 600); do
        grep -q "step $2/" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
wait_for_step "$tmp/st.log" 3
pkill -TERM -P $pid # the trainer (child of timeout)
wait $pid
rc=$?
check "SIGTERM, 1 rank: exit 75 (rc=$rc)" test $rc -eq 75
check "SIGTERM, 1 rank: acknowledged at once" grep -q "^SIGTERM: stopping at the next step boundary, with a checkpoint" \
    "$tmp/st.log"
check "SIGTERM, 1 rank: says so and that the checkpoint is written" \
    grep -q "stopped (SIGTERM at step [0-9]*, .*checkpoint written; resume with checkpoint.resume = auto)" "$tmp/st.log"
out=$("${T[@]}" train.out_dir="$tmp/st" checkpoint.resume=auto 2>&1)
check "SIGTERM, 1 rank: the resumed run exits 0" test $? -eq 0
check "SIGTERM, 1 rank: resumed inside epoch 1" grep -q "resumed from .*ckpt-000000-[0-9]*.cnt" <<<"$out"
check "SIGTERM, 1 rank: losses and lrs equal the uninterrupted run's" diff "$tmp/ref.steps" <(steps "$tmp/st/metrics.jsonl")
check "SIGTERM, 1 rank: each step once" each_step_once "$tmp/st/metrics.jsonl"

# 3a. kill -9 after step 12 with a checkpoint every 10 steps: the resume
# starts at step 10 and keeps the killed run's records past it (steps 11, 12
# and any it got to) in metrics.redone-<time>.jsonl, equal to the
# uninterrupted run's; metrics.jsonl holds each step once.
"${T[@]}" train.out_dir="$tmp/rd" checkpoint.every_steps=10 >"$tmp/rd.log" 2>&1 &
pid=$!
wait_for_step "$tmp/rd.log" 12
pkill -KILL -P $pid
wait $pid 2>/dev/null
out=$("${T[@]}" train.out_dir="$tmp/rd" checkpoint.resume=auto checkpoint.every_steps=10 2>&1)
check "kill -9 past a checkpoint: the resumed run exits 0" test $? -eq 0
said=$(grep -o 'metrics.jsonl: [0-9]* records after step 10 .* moved to [^ ]*' <<<"$out")
rd=${said##* }
check "kill -9 past a checkpoint: the records after step 10 said to be kept (${said:-nothing said})" \
    test -n "$said" -a -f "$rd"
case "$rd" in "$tmp/rd"/metrics.redone-*.jsonl) ok=1 ;; *) ok=0 ;; esac
check "kill -9 past a checkpoint: kept in metrics.redone-<time>.jsonl ($rd)" test $ok -eq 1
# kept_equal FILE: FILE's steps begin 11, 12 and equal the reference's
kept_equal() {
    test "$(steps "$1" | head -n 2 | cut -d' ' -f1 | paste -sd' ')" = "11 12" &&
        diff <(steps "$1") <(awk '$1 > 10' "$tmp/ref.steps" | head -n "$(steps "$1" | wc -l)")
}
check "kill -9 past a checkpoint: the kept steps begin 11, 12 and equal the uninterrupted run's" kept_equal "$rd"
check "kill -9 past a checkpoint: metrics.jsonl equals the uninterrupted run's" \
    diff "$tmp/ref.steps" <(steps "$tmp/rd/metrics.jsonl")
check "kill -9 past a checkpoint: each step once in metrics.jsonl" each_step_once "$tmp/rd/metrics.jsonl"

# 3b. SIGTERM during an evaluation (rank 0 sleeps on entering epoch 1's, a
# test-only fault): the evaluation is left, one checkpoint at the epoch's
# last step, exit 75; the resumed run evaluates epoch 1 first. (It used to
# finish the evaluation, train one more step and write a second checkpoint.)
# records DIR KIND: the number of KIND records in DIR's metrics.jsonl
records() { grep -c "\"kind\":\"$2\"" "$1/metrics.jsonl"; }
d="$tmp/se"
CNT_TEST_STALL_IN=0:evaluation:3 "${T[@]}" train.out_dir="$d" >"$d.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "CNT_TEST_STALL_IN: sleeping" "$d.log" && break; sleep 0.1; done
pkill -TERM -P $pid
wait $pid
rc=$?
check "SIGTERM in evaluation: exit 75 (rc=$rc)" test $rc -eq 75
check "SIGTERM in evaluation: the last line says where" grep -q "stopped (SIGTERM during epoch 1/2's evaluation, after \
step 16; a resume evaluates it first; checkpoint written" "$d.log"
check "SIGTERM in evaluation: one checkpoint, at step 16 (256 samples), no other" \
    test "$(ls "$d/checkpoints")" = "ckpt-000000-0000000256.cnt"
check "SIGTERM in evaluation: no step after 16; epoch 1's record, no eval record" \
    test "$(steps "$d/metrics.jsonl" | tail -n 1 | cut -d' ' -f1)" = 16 -a "$(records "$d" epoch)" -eq 1 \
    -a "$(records "$d" eval)" -eq 0
out=$("${T[@]}" train.out_dir="$d" checkpoint.resume=auto 2>&1)
check "SIGTERM in evaluation: the resumed run exits 0" test $? -eq 0
check "SIGTERM in evaluation: the resume evaluates epoch 1 first" \
    grep -q "256 samples of epoch 1 (step 16 of its 16) and 16 steps done; the epoch's evaluation comes first" <<<"$out"
check "SIGTERM in evaluation: epoch 1 evaluated, then its checkpoint" \
    grep -q "epoch 1/2 (trained before the resume): test loss" <<<"$out"
check "SIGTERM in evaluation: the epoch-end checkpoints are written" \
    test -f "$d/checkpoints/ckpt-000001.cnt" -a -f "$d/checkpoints/ckpt-000002.cnt"
check "SIGTERM in evaluation: losses and lrs equal the uninterrupted run's" \
    diff "$tmp/ref.steps" <(steps "$d/metrics.jsonl")
check "SIGTERM in evaluation: each step once" each_step_once "$d/metrics.jsonl"
check "SIGTERM in evaluation: one epoch and one eval record an epoch" \
    test "$(records "$d" epoch)" -eq 2 -a "$(records "$d" eval)" -eq 2
check "SIGTERM in evaluation: epoch 1's scores equal the uninterrupted run's" \
    test "$(grep '"kind":"eval","epoch":1' "$d/metrics.jsonl" | grep -o '"eval_loss.*')" = \
    "$(grep '"kind":"eval","epoch":1' "$tmp/ref/metrics.jsonl" | grep -o '"eval_loss.*')"

# 3c. SIGTERM during start-up (rank 0 sleeps on entering it): the run ends
# before its first step, exit 75, with nothing trained and nothing new
# written (it used to train a step and checkpoint it); a resumed run so
# stopped leaves its checkpoints and records as they were, and resumes
# exactly afterwards.
# sigterm_in_startup DIR ARGS...: the run, signalled while it sleeps in start-up; echoes its exit status
sigterm_in_startup() {
    local d=$1 pid
    shift
    rm -f "$d.log" # an earlier call's "sleeping" line must not be read as this run's (a loaded machine forks late)
    CNT_TEST_STALL_IN=0:start-up:3 "${T[@]}" train.out_dir="$d" "$@" >"$d.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do grep -q "CNT_TEST_STALL_IN: sleeping" "$d.log" 2>/dev/null && break; sleep 0.1; done
    pkill -TERM -P $pid
    wait $pid
    echo $?
}
d="$tmp/su"
rc=$(sigterm_in_startup "$d")
check "SIGTERM in start-up: exit 75 (rc=$rc)" test "$rc" -eq 75
check "SIGTERM in start-up: the last line says so" grep -q "stopped (SIGTERM during start-up, before step 1; nothing \
trained, nothing new to save; start it again)" "$d.log"
check "SIGTERM in start-up: no step, no checkpoint" \
    test "$(records "$d" step)" -eq 0 -a -z "$(ls "$d/checkpoints" 2>/dev/null)"
"${T[@]}" train.out_dir="$d" train.max_steps=5 >/dev/null 2>&1
before=$(cd "$d/checkpoints" && md5sum *)
rc=$(sigterm_in_startup "$d" checkpoint.resume=auto)
check "SIGTERM in a resumed run's start-up: exit 75 (rc=$rc)" test "$rc" -eq 75
check "SIGTERM in a resumed run's start-up: says so" grep -q "stopped (SIGTERM during start-up, before step 6; \
nothing trained, nothing new to save; resume with checkpoint.resume = auto as this run did)" "$d.log"
check "SIGTERM in a resumed run's start-up: the checkpoints as they were" \
    test "$(cd "$d/checkpoints" && md5sum *)" = "$before"
"${T[@]}" train.out_dir="$d" checkpoint.resume=auto >/dev/null 2>&1
check "SIGTERM in a resumed run's start-up: the next resume gives the uninterrupted run's losses" \
    diff "$tmp/ref.steps" <(steps "$d/metrics.jsonl")
check "SIGTERM in a resumed run's start-up: each step once" each_step_once "$d/metrics.jsonl"

# 3d. SIGTERM while rank 0 writes a step checkpoint (it sleeps on entering
# the first, at step 5): the run stops on that checkpoint, exit 75, no
# further step or checkpoint (it trained step 6 and wrote a second one),
# and resumes exactly.
d="$tmp/sc"
CNT_TEST_STALL_IN=0:checkpoint:3 "${T[@]}" train.out_dir="$d" checkpoint.every_steps=5 >"$d.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "CNT_TEST_STALL_IN: sleeping" "$d.log" 2>/dev/null && break; sleep 0.1; done
pkill -TERM -P $pid
wait $pid
rc=$?
check "SIGTERM in a checkpoint write: exit 75 (rc=$rc)" test $rc -eq 75
check "SIGTERM in a checkpoint write: stopped at step 5" \
    grep -q "stopped (SIGTERM at step 5, 5 of 16 steps into epoch 1/2; checkpoint written" "$d.log"
check "SIGTERM in a checkpoint write: that checkpoint only, no step after it" \
    test "$(ls "$d/checkpoints")" = "ckpt-000000-0000000080.cnt" -a "$(steps "$d/metrics.jsonl" | tail -n 1 | cut -d' ' -f1)" = 5
out=$("${T[@]}" train.out_dir="$d" checkpoint.every_steps=5 checkpoint.resume=auto 2>&1)
check "SIGTERM in a checkpoint write: the resumed run exits 0" test $? -eq 0
check "SIGTERM in a checkpoint write: losses and lrs equal the uninterrupted run's" \
    diff "$tmp/ref.steps" <(steps "$d/metrics.jsonl")

# 4. Two ranks: SIGUSR1 to mpirun (forwarded to every rank) and SIGTERM to
# the ranks themselves (as Slurm signals its tasks) both save at one step.
if command -v mpirun >/dev/null 2>&1 && ./trainer --version | grep -q "^mpi: built in"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    M=(timeout 120 mpirun --oversubscribe --bind-to none -np 2)
    T2=("${T[@]:2}" data.train_limit=1024) # 32 steps an epoch at 2 ranks
    "${M[@]}" "${T2[@]}" train.out_dir="$tmp/ref2" >"$tmp/ref2.log" 2>&1
    check "2 ranks: reference run exits 0" test $? -eq 0
    for sig in USR1 TERM; do
        d="$tmp/s2$sig"
        "${M[@]}" "${T2[@]}" train.out_dir="$d" >"$d.log" 2>&1 &
        pid=$!
        wait_for_step "$d.log" 3
        mpid=$(pgrep -P $pid) # mpirun, under timeout
        if [ $sig = USR1 ]; then
            kill -USR1 $mpid
        else
            pkill -TERM -P $mpid # the ranks, not mpirun
        fi
        wait $pid
        rc=$?
        check "SIG$sig, 2 ranks: exit 75 (rc=$rc)" test $rc -eq 75
        check "SIG$sig, 2 ranks: one checkpoint inside epoch 1" test "$(ls "$d/checkpoints" | grep -c '^ckpt-000000-')" -eq 1
        out=$("${M[@]}" "${T2[@]}" train.out_dir="$d" checkpoint.resume=auto 2>&1)
        check "SIG$sig, 2 ranks: the resumed run exits 0" test $? -eq 0
        check "SIG$sig, 2 ranks: losses equal the uninterrupted 2-rank run's" \
            diff <(steps "$tmp/ref2/metrics.jsonl") <(steps "$d/metrics.jsonl")
    done

    # A stop signal to one rank at the epoch's end, while the other sleeps
    # on entering its evaluation (2 ranks):
    #  - rank 1 signalled during its evaluation (2,000 test images a rank,
    #    so it still evaluates), rank 0 asleep: rank 1 leaves its shard, rank
    #    0 (no signal) evaluates its own, and both stop at the evaluation;
    #  - rank 0 signalled after its evaluation (50 images), waiting for rank
    #    1 asleep: the evaluation completes, and both stop after the
    #    epoch's checkpoint instead of one step into the next epoch.
    # Either way one checkpoint, exit 75 and an exact resume.
    # (rank 0 is signalled 1 s into rank 1's 3 s sleep: its own 50 images are long done)
    for c in "1 0 4000 0 ckpt-000000-0000001024.cnt during_epoch_1/2's_evaluation,_after_step_32" \
             "0 1 100 1 ckpt-000001.cnt at_step_32,_32_of_32_steps_into_epoch_1/2"; do
        read -r victim sleeper tests delay ckpt said <<<"$c"
        said=${said//_/ }
        d="$tmp/se2-$victim"
        CNT_TEST_STALL_IN=$sleeper:evaluation:3 "${M[@]}" -x CNT_TEST_STALL_IN "${T2[@]}" data.test_limit=$tests \
            train.out_dir="$d" >"$d.log" 2>&1 &
        pid=$!
        for _ in $(seq 600); do grep -q "CNT_TEST_STALL_IN: sleeping" "$d.log" && break; sleep 0.1; done
        sleep "$delay"
        for p in $(pgrep -P "$(pgrep -P $pid)"); do # the ranks, children of mpirun
            tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && kill -TERM "$p"
        done
        wait $pid
        rc=$?
        what="SIGTERM to rank $victim while rank $sleeper sleeps in evaluation"
        check "$what: exit 75 (rc=$rc)" test $rc -eq 75
        check "$what: one checkpoint, $ckpt" test "$(ls "$d/checkpoints")" = "$ckpt"
        check "$what: rank 0 says where" grep -q "stopped (SIGTERM $said" "$d.log"
        out=$("${M[@]}" "${T2[@]}" train.out_dir="$d" checkpoint.resume=auto 2>&1)
        check "$what: the resumed run exits 0" test $? -eq 0
        check "$what: losses equal the uninterrupted 2-rank run's" \
            diff <(steps "$tmp/ref2/metrics.jsonl") <(steps "$d/metrics.jsonl")
        check "$what: each step once, one epoch and one eval record an epoch" \
            test "$(records "$d" epoch)" -eq 2 -a "$(records "$d" eval)" -eq 2 -a "$(steps "$d/metrics.jsonl" | wc -l)" -eq 64
    done

    # 5. Resume at another world size: the position and the schedule are
    # recomputed, the run does its two epochs (it used to end one early).
    "${T[@]}" train.out_dir="$tmp/ws" train.max_steps=16 >/dev/null 2>&1
    out=$("${M[@]}" "${T[@]:2}" train.out_dir="$tmp/ws" checkpoint.resume=auto 2>&1)
    check "world 1 -> 2: exit 0" test $? -eq 0
    check "world 1 -> 2: says the geometry changed" grep -q "had 1 rank x batch 16, this one 2 x 16" <<<"$out"
    check "world 1 -> 2: the second epoch is trained and evaluated" grep -q "epoch 2/2 done" <<<"$out"
    check "world 1 -> 2: 16 + 8 steps" grep -q "finished: 24 steps" <<<"$out"
    # the lr at the first resumed step: the 2-rank schedule half-way (epoch 2's first step) = ref2's step 33
    lr_ref=$(steps "$tmp/ref2/metrics.jsonl" | awk '$1 == 33 {print $3}')
    lr_res=$(steps "$tmp/ws/metrics.jsonl" | awk '$1 == 17 {print $3}')
    check "world 1 -> 2: the lr goes on where the schedule is ($lr_res = $lr_ref)" test -n "$lr_ref" -a "$lr_ref" = "$lr_res"
    check "world 1 -> 2: each step once" each_step_once "$tmp/ws/metrics.jsonl"
else
    echo "SKIPPED (part): no MPI in this build: the 2-rank stops and the world-size resume"
fi

# 7. Gradient accumulation (train.accumulate = 2, batch 8: the same 16 steps an
# epoch): a checkpoint counts optimizer steps, a stop signal that comes
# during a step's micro-batches is acted on once the step is whole, and the
# resumed run gives the uninterrupted run's losses bit for bit, at 1 and 2 ranks.
A=("${T[@]}" train.batch_size=8 train.accumulate=2)
"${A[@]}" train.out_dir="$tmp/acc" >"$tmp/acc.log" 2>&1
check "accumulate: reference run exits 0" test $? -eq 0
check "accumulate: 16 steps an epoch of 2 micro-batches" \
    grep -q "2 epochs x 16 steps (batch 8 x 2 micro-batches accumulated (train.accumulate))" "$tmp/acc.log"
check "accumulate: the lr scales with the global batch" grep -q "lr 0.05 per worker x 1 rank x 2 accumulated = 0.1" \
    "$tmp/acc.log"
steps "$tmp/acc/metrics.jsonl" >"$tmp/acc.steps"
check "accumulate: 32 step records" test "$(wc -l <"$tmp/acc.steps")" -eq 32
check "accumulate: the run record's global batch" grep -q '"batch":8,"accumulate":2,"global_batch":16' \
    "$tmp/acc/metrics.jsonl"
out=$("${A[@]}" train.out_dir="$tmp/accm" train.max_steps=11 checkpoint.every_steps=5 2>&1)
check "accumulate, max_steps: a checkpoint at step 11 (176 samples)" \
    test -f "$tmp/accm/checkpoints/ckpt-000000-0000000176.cnt"
out=$("${A[@]}" train.out_dir="$tmp/accm" checkpoint.resume=auto 2>&1)
check "accumulate, max_steps: resumed at step 11 of 16" grep -q "176 samples of epoch 1 (step 11 of its 16)" <<<"$out"
check "accumulate, max_steps: losses and lrs equal the uninterrupted run's" \
    diff "$tmp/acc.steps" <(steps "$tmp/accm/metrics.jsonl")
"${A[@]}" train.out_dir="$tmp/accs" >"$tmp/accs.log" 2>&1 &
pid=$!
wait_for_step "$tmp/accs.log" 3
pkill -TERM -P $pid
wait $pid
rc=$?
check "accumulate, SIGTERM: exit 75 (rc=$rc)" test $rc -eq 75
out=$("${A[@]}" train.out_dir="$tmp/accs" checkpoint.resume=auto 2>&1)
check "accumulate, SIGTERM: the resumed run exits 0" test $? -eq 0
check "accumulate, SIGTERM: losses and lrs equal the uninterrupted run's" \
    diff "$tmp/acc.steps" <(steps "$tmp/accs/metrics.jsonl")
out=$("${T[@]}" train.out_dir="$tmp/accbig" train.accumulate=17 2>&1)
rc=$?
check "accumulate beyond an epoch's batches: refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "accumulate beyond an epoch's batches: says so" \
    grep -q "train.accumulate = 17 micro-batches per step, but rank 0's share of the training set makes 16 batches" \
    <<<"$out"
if [ -n "${M:-}" ]; then
    A2=("${A[@]:2}" data.train_limit=512) # 16 steps an epoch at 2 ranks
    "${M[@]}" "${A2[@]}" train.out_dir="$tmp/acc2" >"$tmp/acc2.log" 2>&1
    check "accumulate, 2 ranks: reference run exits 0" test $? -eq 0
    check "accumulate, 2 ranks: global batch 32" grep -q "dist: 2 ranks .*global batch 32;" "$tmp/acc2.log"
    check "accumulate, 2 ranks: parameters bit-identical" grep -q "parameters bit-identical on all 2 ranks" "$tmp/acc2.log"
    d="$tmp/acc2u"
    "${M[@]}" "${A2[@]}" train.out_dir="$d" >"$d.log" 2>&1 &
    pid=$!
    wait_for_step "$d.log" 3
    kill -USR1 "$(pgrep -P $pid)"
    wait $pid
    rc=$?
    check "accumulate, SIGUSR1, 2 ranks: exit 75 (rc=$rc)" test $rc -eq 75
    out=$("${M[@]}" "${A2[@]}" train.out_dir="$d" checkpoint.resume=auto 2>&1)
    check "accumulate, SIGUSR1, 2 ranks: the resumed run exits 0" test $? -eq 0
    check "accumulate, SIGUSR1, 2 ranks: losses equal the uninterrupted run's" \
        diff <(steps "$tmp/acc2/metrics.jsonl") <(steps "$d/metrics.jsonl")
fi

# 6. A resume may not change the model.
out=$("${T[@]}" train.out_dir="$tmp/ms" checkpoint.resume=auto model.name=resnet32 2>&1)
rc=$?
check "resume with another model.name: refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "resume with another model.name: the key is named" grep -q "model.name = resnet32" <<<"$out"
out=$("${T[@]}" train.out_dir="$tmp/ms" checkpoint.resume=auto model.dropout=0.5 2>&1)
rc=$?
check "resume with another model.dropout: refused naming the key (rc=$rc)" \
    grep -q "may not change the model's keys: model.dropout" <<<"$out"
# ... and other data under data.mean = auto: other estimated values, named with the checkpoint's (a copy of
# the run, so the runs above keep theirs)
cp -a "$tmp/ms" "$tmp/norm"
out=$("${T[@]}" train.out_dir="$tmp/norm" checkpoint.resume=auto data.train_limit=512 train.max_steps=33 2>&1)
check "resume on other data, data.mean = auto: a warning with both normalisations and the keys to give" \
    grep -qE "^warning: resume: this run normalises its inputs with data.mean=[0-9.]+ data.std=[0-9.]+, the run that wrote .*ckpt-0000(01|02).*cnt with data.mean=[0-9.]+ data.std=[0-9.]+: give those two" <<<"$out"

# Two runs in one train.out_dir: the second is refused, naming the first
# (which runs long enough to still hold the directory on a fast machine: 2
# epochs of 256 images take well under a second on some; it is killed below).
# The refused run touches none of the running run's files (it had truncated
# the running run's timeline part, whose trace then was not JSON).
"${T[@]}" train.out_dir="$tmp/lock" train.epochs=2000 dist.timeline=trace.json >"$tmp/lock.log" 2>&1 &
pid=$!
wait_for_step "$tmp/lock.log" 1
out=$("${T[@]}" train.out_dir="$tmp/lock" checkpoint.resume=auto dist.timeline=trace.json 2>&1)
rc=$?
check "a second run in the same train.out_dir: refused (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
check "a second run in the same train.out_dir: names the other run" \
    grep -q "train.out_dir = $tmp/lock is in use by another run (pid [0-9]* on" <<<"$out"
check "a second run in the same train.out_dir: claims none of its metrics" \
    bash -c '! grep -q "metrics so far" <<<"$1"' _ "$out"
check "a second run in the same train.out_dir: the first run's timeline part keeps its start" \
    grep -q '"process_name"' <(head -c 200 "$tmp/lock/trace.json.rank0.part")
pkill -TERM -P $pid
wait $pid 2>/dev/null
check "a second run in the same train.out_dir: the first run's trace is JSON" \
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/lock/trace.json" 2>/dev/null

# 7. Rollback: resuming an older checkpoint moves the newer ones aside (not
# overwritten), and auto then takes the new lineage.
d="$tmp/rb"
"${T[@]}" train.out_dir="$d" >/dev/null 2>&1
old2=$(md5sum <"$d/checkpoints/ckpt-000002.cnt")
out=$("${T[@]}" train.out_dir="$d" checkpoint.resume="$d/checkpoints/ckpt-000001.cnt" optim.lr=0.02 2>&1)
check "rollback: exit 0" test $? -eq 0
check "rollback: says the newer checkpoint moved" grep -q "1 checkpoint beyond this run's starting point .* moved to $d/checkpoints/superseded-" <<<"$out"
sup=$(ls -d "$d"/checkpoints/superseded-* 2>/dev/null | head -1)
check "rollback: the old epoch-2 checkpoint is intact in $sup" test "$(md5sum <"$sup/ckpt-000002.cnt" 2>/dev/null)" = "$old2"
check "rollback: the new lineage's epoch 2 differs" test "$(md5sum <"$d/checkpoints/ckpt-000002.cnt")" != "$old2"
check "rollback: the old run's records after step 16 kept aside" test "$(cat "$d"/metrics.superseded-*.jsonl | grep -c '"kind":"step"')" -eq 16
check "rollback: metrics.jsonl has each step once" each_step_once "$d/metrics.jsonl"
out=$("${T[@]}" train.out_dir="$d" checkpoint.resume=auto train.epochs=3 train.max_steps=33 2>&1)
check "rollback: auto picks the new lineage" grep -q "resumed from $d/checkpoints/ckpt-000002.cnt" <<<"$out"
# A fresh start in the same directory: everything earlier moves aside.
out=$("${T[@]}" train.out_dir="$d" train.max_steps=2 2>&1)
check "fresh start over an earlier run: its checkpoints moved aside" grep -q "beyond this run's starting point (a fresh start)" <<<"$out"
check "fresh start over an earlier run: its metrics kept as metrics.<time>.jsonl" grep -q "earlier run's records moved to $d/metrics\.[0-9-]*\.jsonl" <<<"$out"
# Two fresh starts within one second: the earlier run's metrics.jsonl and
# config.ini are stamped with a second whose names are already taken; each
# goes to the next free name (-2), nothing is overwritten.
stamp=$(date -d @1700000000 +%Y%m%d-%H%M%S)
echo taken >"$d/metrics.$stamp.jsonl"
echo taken >"$d/config.$stamp.ini"
cp "$d/metrics.jsonl" "$tmp/fresh-metrics"
cp "$d/config.ini" "$tmp/fresh-config"
touch -d @1700000000 "$d/metrics.jsonl" "$d/config.ini"
out=$("${T[@]}" train.out_dir="$d" train.max_steps=1 2>&1)
check "fresh start within one second: exit 0" test $? -eq 0
check "fresh start within one second: metrics.$stamp.jsonl untouched" test "$(cat "$d/metrics.$stamp.jsonl")" = taken
check "fresh start within one second: config.$stamp.ini untouched" test "$(cat "$d/config.$stamp.ini")" = taken
check "fresh start within one second: the earlier metrics kept as metrics.$stamp-2.jsonl" \
    cmp "$tmp/fresh-metrics" "$d/metrics.$stamp-2.jsonl"
check "fresh start within one second: the earlier config kept as config.$stamp-2.ini" \
    cmp "$tmp/fresh-config" "$d/config.$stamp-2.ini"

# A run that fails says what it can resume from. 1024 images (64 steps an
# epoch): it diverges inside an epoch (at step 24 here), where the next
# step's batch is already staged and the evaluation that follows must not
# find the stager taken (seen failing with exit 3 when the staged batch was
# not let go).
out=$("${T[@]}" train.out_dir="$tmp/div" data.train_limit=1024 train.epochs=15 optim.lr=100 checkpoint.every_steps=1 2>&1)
rc=$?
check "a diverged run: exit 1 (rc=$rc)" test $rc -eq 1
check "a diverged run: the last line names the last checkpoint and its step" \
    grep -q "^stopped after [0-9]* steps .*; last checkpoint $tmp/div/checkpoints/ckpt-[0-9-]*.cnt (step [0-9]*)" <<<"$out"

# The log itself on a full disk: the run does not end with status 0.
err=$("${T[@]}" train.out_dir="$tmp/logfull" train.max_steps=2 2>&1 >/dev/full)
rc=$?
check "log (stdout) on a full device: exit 1 (rc=$rc)" test $rc -eq 1
check "log (stdout) on a full device: said on stderr" grep -q "cannot write the log (standard output or error): No space left on device" <<<"$err"

# Outputs that are not regular files are refused at once, never blocked on.
for f in metrics.jsonl config.ini; do
    mkdir -p "$tmp/fifo-$f"
    mkfifo "$tmp/fifo-$f/$f"
    out=$(timeout 20 "${T[@]}" train.out_dir="$tmp/fifo-$f" train.max_steps=1 2>&1)
    rc=$?
    check "$f is a FIFO: refused at once (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
    check "$f is a FIFO: named" grep -q "'$tmp/fifo-$f/$f': it is a FIFO" <<<"$out"
done

# 8. A full disk (a tiny tmpfs, where mounting is allowed): the metrics
# write fails with the file and ENOSPC named, non-zero exit, the checkpoints
# intact. (A file-size limit cannot stand in: MPI's start-up needs files.)
mnt="$tmp/small"
mkdir -p "$mnt"
if mount -t tmpfs -o size=12k tmpfs "$mnt" 2>/dev/null; then # .lock, config.ini and metrics.jsonl a page each
    out=$("${T[@]}" train.out_dir="$mnt/run" checkpoint.dir="$tmp/fdck" checkpoint.every_steps=4 2>&1)
    rc=$?
    check "full tmpfs: non-zero exit (rc=$rc)" test $rc -ne 0 -a $rc -ne 124
    check "full tmpfs: the error names the file and ENOSPC" grep -q "cannot write '$mnt/run/metrics.jsonl': No space left on device" <<<"$out"
    last=$(ls "$tmp/fdck" | tail -1)
    check "full tmpfs: the last checkpoint ($last) still loads" \
        timeout 60 ./trainer --export "$tmp/fdck/$last" "$tmp/fd.safetensors"
    umount "$mnt"
else
    echo "SKIPPED (part): tmpfs cannot be mounted here: the full-disk case"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all resume checks passed"
