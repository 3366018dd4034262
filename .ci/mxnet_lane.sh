#!/usr/bin/env bash
# CI mxnet lane: the tests marked `mxnet` in a fresh virtual environment with the mxnet extra
# (MXNet 1.9.1 needs Python 3.11 and numpy<1.24). Fails when pytest fails, collects nothing (exit 5),
# or runs no test at all (every test skipped, e.g. because mxnet did not import).
# Slow mxnet tests (every Gluon model decomposed) run too unless DLBRICKS_SLOW=0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

rm -rf .venv-mxnet
"$PY" -m venv .venv-mxnet
# shellcheck disable=SC1091
source .venv-mxnet/bin/activate
python -m pip install -q --upgrade pip
pip install -e ".[test,mxnet]"
python -c "import mxnet, numpy; print('mxnet', mxnet.__version__, 'numpy', numpy.__version__)"

report=.venv-mxnet/pytest-mxnet.xml
set +e
DLBRICKS_SLOW=${DLBRICKS_SLOW:-1} python -m pytest -q -m mxnet -p no:cacheprovider --junitxml="$report"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "mxnet lane: pytest collected no tests: failing"; exit 1; fi
if [ "$rc" -ne 0 ]; then echo "mxnet lane failed (exit $rc)"; exit "$rc"; fi
ran=$(python - "$report" <<'EOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
print(sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites))
EOF
)
if [ "$ran" -le 0 ]; then echo "mxnet lane: every test was skipped (is mxnet importable?): failing"; exit 1; fi
echo "mxnet lane passed ($ran tests ran)"
