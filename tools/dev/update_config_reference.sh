#!/usr/bin/env bash
# tools/dev/update_config_reference.sh - regenerate docs/usage.md's config
# reference from the parser's own table (`./trainer --config-reference md`), between the markers
# <!-- config-reference:begin --> and <!-- config-reference:end -->.
# tests/test_cli.sh fails when it is out of date. Run after `make`.
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=$(mktemp)
trap 'rm -f "$ref"' EXIT
./trainer --config-reference md > "$ref"
python3 - "$ref" docs/usage.md <<'PY'
import sys
ref = open(sys.argv[1]).read()
path = sys.argv[2]
text = open(path).read()
begin, end = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"
i, j = text.index(begin) + len(begin), text.index(end)
open(path, "w").write(text[:i] + "\n" + ref.strip() + "\n" + text[j:])
PY
echo "docs/usage.md: config reference updated"
