#!/usr/bin/env bash
# tests/test_image_torch.sh - the loader's JPEG decode and resize against
# torchvision's on natural photographs: tools/photo_jpegs.py writes 60
# ImageNet-shaped JPEGs (4:2:0 at quality 75-95, some greyscale and
# progressive, one CMYK) from the photographs scikit-image and matplotlib
# ship; tools/check_image_torch.py renders each through
# build/tools/render_image and through torchvision (RandomResizedCrop's
# resized_crop, and Resize(256) + CenterCrop(224)) on PIL images.
# Stated tolerances: at full size (data.jpeg_scaling=false) every value within
# 1 level of torchvision (the pass order of Pillow 13's resize differs for
# some boxes); with DCT scaling, the mean difference below 0.5 levels over all
# files (most crops of 500-pixel photographs are decoded at full size; the
# ones at 1/2 size differ by 1-2.5 levels on average).
# Run from the repository root after `make`, with PyTorch, torchvision and
# Pillow in $TORCH_PYTHON or /opt/torch-venv/bin/python (not a project
# dependency; tools/bench_cpu_torch.sh makes it) and scikit-image or
# matplotlib's sample photograph. Prints "SKIPPED: ..." (and exits 0)
# without them. Takes about 10 s.
set -u
skip() { echo "SKIPPED: $*"; exit 0; }
py=${TORCH_PYTHON:-/opt/torch-venv/bin/python}
"$py" -c 'import torch, torchvision, PIL' 2> /dev/null ||
    skip "no PyTorch, torchvision and Pillow in $py (python3 -m venv /opt/torch-venv &&" \
        "/opt/torch-venv/bin/pip install torch torchvision, or set TORCH_PYTHON)"
"$py" -c 'import skimage' 2> /dev/null || [ -f /usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg ] ||
    skip "no source photographs (pip install scikit-image into $py, or install python3-matplotlib)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$(dirname "$0")/support/check.sh" # check DESCRIPTION COMMAND...

"$py" tools/photo_jpegs.py "$tmp/p" --train 50 --val 10 --classes 5 --seed 3 > /dev/null 2>&1
check "photo_jpegs.py writes 60 JPEGs" test "$(find "$tmp/p" -name '*.JPEG' | wc -l)" -eq 60
out=$("$py" tools/check_image_torch.py build/tools/render_image "$tmp/p" --max 60 --json 2> "$tmp/err")
rc=$?
cat "$tmp/err" | grep -v Warning >&2
echo "$out"
check "check_image_torch.py: full-size renders within 1 level of torchvision (exit 0)" test $rc -eq 0
field() { "$py" -c 'import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]][sys.argv[3]])' "$out" "$1" "$2"; }
for kind in train eval; do
    check "$kind at full size: largest difference at most 1 level" test "$(field "$kind full" max)" -le 1
    check "$kind with DCT scaling: mean difference below 0.5 levels" \
        "$py" -c "import sys; sys.exit(not float(sys.argv[1]) < 0.5)" "$(field "$kind dct" mean)"
done
[ "$fails" -eq 0 ]
