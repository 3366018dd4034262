#!/usr/bin/env bash
# CI openvino lane: the tests marked `openvino` (OpenVINO's CPU plugin as a backend, tests/test_openvino.py)
# in a fresh virtual environment with the openvino extra, alone (they time bricks). Fails when pytest fails,
# collects nothing (exit 5), or runs no test at all (every test skipped, e.g. because openvino did not import).
# With LANE_ENV_READY=1 the environment .venv-openvino is taken as already made.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/_lane.sh
source .ci/_lane.sh

[ "${LANE_ENV_READY:-0}" = 1 ] || make_env .venv-openvino test,openvino
.venv-openvino/bin/python -c "import openvino, onnxruntime; print('openvino', openvino.__version__, 'onnxruntime', onnxruntime.__version__)"
run_marked openvino .venv-openvino openvino
