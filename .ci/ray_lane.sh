#!/usr/bin/env bash
# CI ray lane: the tests marked `ray` (a real local Ray cluster, tests/test_ray.py) in a fresh virtual
# environment with the distributed extra. Fails when pytest fails, collects nothing (exit 5), or runs no
# test at all (every test skipped, e.g. because ray did not import).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

rm -rf .venv-ray
"$PY" -m venv .venv-ray
# shellcheck disable=SC1091
source .venv-ray/bin/activate
python -m pip install -q --upgrade pip
pip install -q -e ".[test,distributed]"
python -c "import ray, onnxruntime; print('ray', ray.__version__, 'onnxruntime', onnxruntime.__version__)"

report=.venv-ray/pytest-ray.xml
set +e
python -m pytest -q -m ray -p no:cacheprovider --junitxml="$report"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "ray lane: pytest collected no tests: failing"; exit 1; fi
if [ "$rc" -ne 0 ]; then echo "ray lane failed (exit $rc)"; exit "$rc"; fi
ran=$(python - "$report" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
print(sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites))
PYEOF
)
if [ "$ran" -le 0 ]; then echo "ray lane: every test was skipped (is ray importable?): failing"; exit 1; fi
echo "ray lane passed ($ran tests ran)"
