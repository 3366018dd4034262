#!/usr/bin/env bash
# CI mxnet lane: the tests marked `mxnet` in a fresh virtual environment with the mxnet extra
# (MXNet 1.9.1 needs Python 3.11 and numpy<1.24). Fails when pytest fails, collects nothing (exit 5),
# or runs no test at all (every test skipped, e.g. because mxnet did not import).
# Slow mxnet tests (every Gluon model decomposed) run too unless DLBRICKS_SLOW=0.
# MXNET_LANE_MARKER narrows the tests (.ci/run runs the untimed ones earlier, beside other work).
# With LANE_ENV_READY=1 the environment .venv-mxnet is taken as already made (.ci/run makes it earlier).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/_lane.sh
source .ci/_lane.sh

[ "${LANE_ENV_READY:-0}" = 1 ] || make_env .venv-mxnet test,mxnet
.venv-mxnet/bin/python -c "import mxnet, numpy; print('mxnet', mxnet.__version__, 'numpy', numpy.__version__)"
run_marked mxnet .venv-mxnet "${MXNET_LANE_MARKER:-mxnet}" "DLBRICKS_SLOW=${DLBRICKS_SLOW:-1}"
