#!/usr/bin/env bash
# tests/test_plots.sh - tools/plot_scaling.py draws simulate's CSV tables (and
# measured ones) into a PNG; refuses a table without the needed columns (exit
# 1) and a call without tables (exit 2). tools/plot_metrics.py draws a real
# run's metrics.jsonl (two runs overlaid) against step, time, epoch and
# images, and asynchronous runs' staleness; refuses a file without "time"
# for a time axis and a run without staleness records (exit 1), and unknown
# panels (exit 2). tools/plot_timeline.py draws a trace's tracks for a
# window of steps; refuses a window without events and a file that is not
# a trace (exit 1). Skipped without matplotlib (make deps
# installs Debian's python3-matplotlib). Run from the repository root after make.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...
skip() { echo "SKIPPED: $*"; exit 0; }
python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
    skip "matplotlib not found (make deps installs python3-matplotlib)"

cat >"$tmp/p.json" <<'JSON'
{"model":"tiny","device":"cpu","precision":"fp32","input":[1,8,8],"classes":10,"batch":10,"params":1000,"grad_bytes":4000,"step_ms":9.5,"forward_ms":3,
 "backward_ms":5,"update_ms":1,"data_wait_ms":0.5,"first_bucket_values":600,"bucket_values":1000,
 "buckets":[{"begin":0,"end":600,"bytes":2400},{"begin":600,"end":1000,"bytes":1600}],
 "layers":[{"name":"fc","kind":"linear","forward_ms":1,"backward_ms":2,"grad_begin":0,"grad_end":600,"grad_bytes":2400,"completes":[0]},
           {"name":"conv","kind":"conv","forward_ms":2,"backward_ms":3,"grad_begin":600,"grad_end":1000,"grad_bytes":1600,"completes":[1]}]}
JSON
./build/tools/simulate "$tmp/p.json" --bw 0.01 --csv "$tmp/a.csv" >/dev/null 2>&1
./build/tools/simulate "$tmp/p.json" --bw 1 --csv "$tmp/b.csv" >/dev/null 2>&1
printf 'workers,images_per_s,efficiency\n1,1052,1\n2,1900,0.9\n' >"$tmp/m.csv"
out=$(python3 tools/plot_scaling.py "$tmp/s.png" --title "tiny" "$tmp/a.csv=slow" "$tmp/b.csv=fast" --measured "$tmp/m.csv=measured" 2>&1)
check "plot_scaling.py: exit 0 and says what it wrote" bash -c "grep -q 'wrote $tmp/s.png' <<<\"\$1\"" _ "$out"
check "plot_scaling.py: the file is a PNG" bash -c "head -c 8 '$tmp/s.png' | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'"
printf 'workers,step_ms\n1,2\n' >"$tmp/bad.csv"
out=$(python3 tools/plot_scaling.py "$tmp/t.png" "$tmp/bad.csv" 2>&1)
rc=$?
check "plot_scaling.py: a table without images_per_s exits 1 naming the file and column" \
    bash -c "[ $rc -eq 1 ] && grep -q \"bad.csv': no column 'images_per_s'\" <<<\"\$1\"" _ "$out"
python3 tools/plot_scaling.py "$tmp/t.png" >/dev/null 2>&1
check "plot_scaling.py: no table exits 2" test $? -eq 2

# plot_metrics.py on a real run (2 epochs of 64 images) drawn twice under two names
timeout 120 ./trainer configs/resnet20-fashion.ini train.device=cpu train.threads=1 data.workers=1 data.train_limit=64 \
    data.test_limit=32 train.batch_size=16 train.epochs=2 train.log_every=2 train.out_dir="$tmp/run" >/dev/null 2>&1
check "plot_metrics.py: the run for it exits 0" test $? -eq 0
out=$(python3 tools/plot_metrics.py "$tmp/run=one" "$tmp/run/metrics.jsonl=again" -o "$tmp/c.png" \
      --x step,time,epoch,images --panels loss,top1,top5,eval,lr,ips 2>&1)
check "plot_metrics.py: 6 panels x 4 axes of 2 runs written" grep -q "wrote $tmp/c.png (6 panels x 4 axes, 2 run(s))" <<<"$out"
check "plot_metrics.py: the file is a PNG" bash -c "head -c 8 '$tmp/c.png' | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'"
out=$(python3 tools/plot_metrics.py "$tmp/run" -o "$tmp/s.png" --staleness "$tmp/st.png" 2>&1)
rc=$?
check "plot_metrics.py: --staleness on a run without staleness records exits 1 saying so" \
    bash -c "[ $rc -eq 1 ] && grep -q 'no run has staleness records' <<<\"\$1\"" _ "$out"
# an asynchronous run's records, as trainer writes them (tests/test_ps.sh makes real ones)
cat >"$tmp/async.jsonl" <<'JSON'
{"kind":"step","epoch":1,"step":10,"time":1.5,"images":320,"loss":2.1,"lr":0.1,"img_per_sec":200,"step_ms":5,"data_wait_ms":0,"comm_ms":0,"comm_exposed_ms":0,"loss_scale":1,"skipped_steps":0}
{"kind":"staleness","epoch":1,"step":16,"time":2.0,"mean":0.5,"max":3,"applied":32,"hist":[20,8,3,1,0,0,0,0,0,0,0,0,0,0,0,0]}
{"kind":"eval","epoch":1,"step":16,"time":2.2,"images":512,"eval_loss":1.9,"top1":0.3,"top5":0.8}
{"kind":"staleness","epoch":2,"step":32,"time":4.0,"mean":1.1,"max":2,"applied":32,"hist":[4,20,8,0,0,0,0,0,0,0,0,0,0,0,0,0]}
{"kind":"eval","epoch":2,"step":32,"time":4.2,"images":1024,"eval_loss":1.5,"top1":0.45,"top5":0.9}
JSON
out=$(python3 tools/plot_metrics.py "$tmp/async.jsonl=async" -o "$tmp/a.png" --staleness "$tmp/st.png" 2>&1)
check "plot_metrics.py: --staleness draws an asynchronous run's histogram" \
    bash -c "grep -q 'wrote $tmp/st.png' <<<\"\$1\" && head -c 4 '$tmp/st.png' | od -An -tx1 | grep -q '89 50 4e 47'" _ "$out"
# a file written before "time" existed: a time axis has nothing to draw
grep -v '"kind":"run"' "$tmp/run/metrics.jsonl" | sed 's/"time":[^,]*,//; s/"images":[^,]*,//' >"$tmp/old.jsonl"
out=$(python3 tools/plot_metrics.py "$tmp/old.jsonl" -o "$tmp/o.png" --x time 2>&1)
rc=$?
check "plot_metrics.py: a time axis for a file without \"time\" exits 1 saying why" \
    bash -c "[ $rc -eq 1 ] && grep -q \"nothing to draw for loss against time\" <<<\"\$1\"" _ "$out"
python3 tools/plot_metrics.py "$tmp/run" --panels nope >/dev/null 2>&1
check "plot_metrics.py: an unknown panel exits 2" test $? -eq 2

# plot_timeline.py: two ranks, two steps, a layer inside backward, a bucket on the comm track
cat >"$tmp/trace.json" <<'JSON'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},
{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"train"}},
{"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"comm"}},
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 1"}},
{"name":"forward","cat":"forward","ph":"X","pid":0,"tid":0,"ts":0,"dur":10,"args":{"step":1}},
{"name":"backward","cat":"backward","ph":"X","pid":0,"tid":0,"ts":10,"dur":20,"args":{"step":1}},
{"name":"bwd fc","cat":"backward","ph":"X","pid":0,"tid":0,"ts":10,"dur":5,"args":{"step":1}},
{"name":"allreduce bucket 0","cat":"comm","ph":"X","pid":0,"tid":1,"ts":15,"dur":12,"args":{"step":1}},
{"name":"forward","cat":"forward","ph":"X","pid":1,"tid":0,"ts":1,"dur":10,"args":{"step":1}},
{"name":"forward","cat":"forward","ph":"X","pid":0,"tid":0,"ts":40,"dur":10,"args":{"step":2}},
{"name":"bucket 0 ready","cat":"flow","ph":"s","id":1,"pid":0,"tid":0,"ts":15,"args":{"step":1}},
{"name":"bucket 0 ready","cat":"flow","ph":"f","bp":"e","id":1,"pid":0,"tid":1,"ts":15,"args":{"step":1}}
],"displayTimeUnit":"ms"}
JSON
out=$(python3 tools/plot_timeline.py "$tmp/trace.json" --steps 1:2 2>&1)
check "plot_timeline.py: 3 tracks, 6 events and an arrow of steps 1 to 2, next to the trace" \
    bash -c "grep -q 'wrote $tmp/trace.png (3 tracks, 6 events, 1 arrows, steps 1 to 2)' <<<\"\$1\" && head -c 4 '$tmp/trace.png' | od -An -tx1 | grep -q '89 50 4e 47'" _ "$out"
out=$(python3 tools/plot_timeline.py "$tmp/trace.json" --steps 5:9 -o "$tmp/t2.png" 2>&1)
rc=$?
check "plot_timeline.py: a window without events exits 1 naming the steps the trace has" \
    bash -c "[ $rc -eq 1 ] && grep -q 'no events in steps 5:9 (the trace has steps 1 to 2)' <<<\"\$1\"" _ "$out"
out=$(python3 tools/plot_timeline.py "$tmp/async.jsonl" -o "$tmp/t3.png" 2>&1)
rc=$?
check "plot_timeline.py: a file that is not a trace exits 1 naming it" \
    bash -c "[ $rc -eq 1 ] && grep -q \"async.jsonl' is not a Chrome trace\" <<<\"\$1\"" _ "$out"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
