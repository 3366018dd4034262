# Shared by the CI scripts (sourced): make a lane's virtual environment, run a lane's marked tests.
# shellcheck shell=bash

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

make_env() {  # make_env DIR EXTRAS: a fresh virtual environment with dlbricks[EXTRAS] installed
    local dir=$1 extras=$2
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/pip" install -q -e ".[$extras]"
}

run_marked() {  # run_marked NAME DIR MARKER [VAR=VALUE...]: the tests marked MARKER in DIR's environment
    # fails when pytest fails, collects nothing (exit 5), or runs no test at all (every test skipped,
    # e.g. because the extra did not import)
    local name=$1 dir=$2 marker=$3
    shift 3
    local report=$dir/pytest-$name.xml rc ran
    set +e
    env PATH="$PWD/$dir/bin:$PATH" VIRTUAL_ENV="$PWD/$dir" "$@" "$dir/bin/python" -m pytest -q -m "$marker" -p no:cacheprovider --durations=10 --junitxml="$report"
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then echo "$name lane: pytest collected no tests: failing"; exit 1; fi
    if [ "$rc" -ne 0 ]; then echo "$name lane failed (exit $rc)"; exit "$rc"; fi
    ran=$("$dir/bin/python" - "$report" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
print(sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites))
PYEOF
)
    if [ "$ran" -le 0 ]; then echo "$name lane: every test was skipped (is the extra importable?): failing"; exit 1; fi
    echo "$name lane passed ($ran tests ran)"
}
