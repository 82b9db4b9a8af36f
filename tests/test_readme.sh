#!/usr/bin/env bash
# tests/test_readme.sh - the README shows what the trainer prints. A short real
# run of the quick start's config must print a line of the same form for every
# line of the README's sample output (between <!-- sample-output:begin --> and
# <!-- sample-output:end -->; numbers and absolute paths may differ, the device
# line only needs its "device: " prefix), and the sample must show a form for
# every line the run printed; each sample metrics.jsonl line (between
# <!-- sample-metrics:begin/end -->) must have exactly the keys, in order, of
# the run's lines of its "kind"; and docs/usage.md's "Command line" block
# must hold every usage line of `./trainer --help`.
# Run from the repository root after `make`. Exits non-zero when a check fails.
set -u
repo=$PWD
T=$repo/trainer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...

# Two epochs of 20 steps on 160 training images, evaluated on 32: every kind of
# line the full quick start prints, in seconds. Run inside $tmp so that the
# config's relative train.out_dir (runs/resnet20-fashion) prints as in the README.
(cd "$tmp" && "$T" "$repo/configs/resnet20-fashion.ini" data.train_limit=160 train.batch_size=8 \
    train.max_steps=40 train.log_every=10 data.test_limit=32) > "$tmp/out.txt" 2>&1
rc=$?
check "short quick-start run: exit 0" test "$rc" -eq 0
[ "$rc" -eq 0 ] || cat "$tmp/out.txt"

# Each check below prints its own ok/FAIL lines; the exit status counts the FAILs.
python3 - README.md "$tmp/out.txt" "$tmp/runs/resnet20-fashion/metrics.jsonl" <<'PY'
import json, re, sys

readme = open(sys.argv[1]).read()
out_lines = open(sys.argv[2]).read().splitlines()
fails = 0


def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails += 1
        if detail:
            print("     " + detail)


def block(name):
    """The lines inside the code fence between the name's begin/end markers."""
    m = re.search(r"<!-- %s:begin -->\n```[a-z]*\n(.*?)```\n<!-- %s:end -->" % (name, name), readme, re.S)
    return m.group(1).splitlines() if m else []


# Durations (eta 36m57s, 1h02m), absolute paths, numbers (integers, decimals,
# exponents); everything else stays literal.
TOKEN = re.compile(r"(?P<dur>\b\d+h\d\dm\b|\b\d+m\d\ds\b)|(?P<path>(?<![\w/])/[\w.+-]+(?:/[\w.+-]+)*)"
                   r"|(?P<num>\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
PATTERN = {"dur": r"(?:\d+h\d\dm|\d+m\d\ds)", "path": r"/[^\s,;()]+", "num": r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"}


def line_regex(line):
    if line.startswith("device: "):  # the machine's own device
        return re.compile(re.escape("device: ") + ".*")
    parts, pos = [], 0
    for m in TOKEN.finditer(line):
        parts.append(re.escape(line[pos:m.start()]))
        parts.append(PATTERN[m.lastgroup])
        pos = m.end()
    parts.append(re.escape(line[pos:]))
    return re.compile("".join(parts))


sample = [l for l in block("sample-output") if l.strip() != "..."]
check(len(sample) >= 5, "README holds a sample output block (%d lines besides ...)" % len(sample))
regexes = []
for line in sample:
    rx = line_regex(line)
    regexes.append(rx)
    check(any(rx.fullmatch(o) for o in out_lines), "sample line printed by a real run: " + line[:60])
unmatched = [o for o in out_lines if not any(rx.fullmatch(o) for rx in regexes)]
check(out_lines and not unmatched, "every line of the real run has its form in the sample",
      "not in the README's sample: " + " | ".join(unmatched))

try:
    real = [json.loads(l) for l in open(sys.argv[3])]
except (OSError, ValueError) as e:
    real = []
    check(False, "the run's metrics.jsonl reads as JSON lines", str(e))
sample_json = block("sample-metrics")
check(len(sample_json) >= 3, "README holds a sample metrics block (%d lines)" % len(sample_json))
for line in sample_json:
    try:
        rec = json.loads(line)
    except ValueError as e:
        check(False, "sample metrics line is JSON: " + line[:60], str(e))
        continue
    kind = rec.get("kind")
    same = [list(r) for r in real if r.get("kind") == kind]
    check(bool(same) and all(keys == list(rec) for keys in same),
          'sample metrics line of kind "%s": the run\'s lines of that kind have its keys in its order' % kind,
          "sample: %s; run: %s" % (list(rec), same[0] if same else "no line of that kind"))
sys.exit(min(fails, 255))
PY
fails=$((fails + $?))

# docs/usage.md's Command line block: every line of --help's usage, as printed.
"$T" --help | sed '/^$/q' | sed '/^$/d' > "$tmp/usage.txt"
check "--help starts with usage lines" test -s "$tmp/usage.txt"
while IFS= read -r line; do
    trimmed=${line#"${line%%[! ]*}"}
    check "docs/usage.md has the usage line: ${trimmed:0:60}" grep -qxF -- "$line" docs/usage.md
done < "$tmp/usage.txt"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all README checks passed"
