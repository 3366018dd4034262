#!/usr/bin/env bash
# CI report lane: the tests marked `plot` or `browser` (tests/test_report.py: the HTML report and
# evaluate's figures, drawn with matplotlib; the page loaded in a real headless Chromium, which must
# request nothing and log no error) in a fresh virtual environment with the plot extra. Chromium comes
# from the distribution's packages (apt-get install chromium) where it is not on PATH; without apt-get
# the lane fails, saying so. Fails when pytest fails, collects nothing (exit 5), or runs no test at all
# (every test skipped, e.g. because matplotlib did not import); a missing Chromium fails the browser test
# here (DLBRICKS_REQUIRE_BROWSER=1) instead of skipping it as the core lane does.
# With LANE_ENV_READY=1 the environment .venv-report is taken as already made.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/_lane.sh
source .ci/_lane.sh

have_chromium() { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }
if ! have_chromium; then
    if ! command -v apt-get >/dev/null; then
        echo "report lane: no Chromium on PATH and no apt-get to install it (on Debian or Ubuntu: apt-get install" \
             "chromium; elsewhere put a Chromium on PATH): failing"
        exit 1
    fi
    echo "report lane: installing Chromium from the distribution's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    have_chromium || { echo "report lane: apt-get installed no chromium command: failing"; exit 1; }
fi

[ "${LANE_ENV_READY:-0}" = 1 ] || make_env .venv-report test,plot
.venv-report/bin/python -c "import matplotlib, onnxruntime; print('matplotlib', matplotlib.__version__, 'onnxruntime', onnxruntime.__version__)"
run_marked report .venv-report "plot or browser" DLBRICKS_REQUIRE_BROWSER=1
