#!/usr/bin/env bash
# What `pip install -e .[vllm]` would do to this venv, without installing anything: a dry-run resolve of the
# `vllm` extra (pip --dry-run --report). Prints the vLLM it picks and what happens to torch and transformers, and
# exits 1 when the extra would replace the tested torch or transformers (the pin in pyproject.toml exists to keep them).
# Usage: bench/vllm_resolve.sh [python]   (default .venv/bin/python; needs the package index, downloads metadata only)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
report=$(mktemp --suffix=.json)
trap 'rm -f "$report"' EXIT
"$PY" -m pip install --dry-run --quiet --report "$report" -e ".[vllm]"
"$PY" - "$report" <<'PY'
import json, sys
from importlib.metadata import version
picked = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.load(open(sys.argv[1]))["install"]}
print(f"vllm extra resolves to vllm {picked.get('vllm', '(already installed)')}")
changed = []
for name in ("torch", "transformers"):
    now = version(name)
    after = picked.get(name, now)
    print(f"  {name}: {now} -> {after}" if after != now else f"  {name}: {now} (kept)")
    if after.split("+")[0] != now.split("+")[0]:
        changed.append(name)
print(f"  {len(picked)} packages would be installed or changed")
if changed:
    sys.exit(f"error: the vllm extra would replace the tested {' and '.join(changed)}; narrow its pin in pyproject.toml")
PY
