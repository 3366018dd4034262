#!/usr/bin/env bash
# CI ray lane: the tests marked `ray` (a real local Ray cluster, tests/test_ray.py) in a fresh virtual
# environment with the distributed extra. Fails when pytest fails, collects nothing (exit 5), or runs no
# test at all (every test skipped, e.g. because ray did not import).
# With LANE_ENV_READY=1 the environment .venv-ray is taken as already made (.ci/run makes it earlier).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/_lane.sh
source .ci/_lane.sh

[ "${LANE_ENV_READY:-0}" = 1 ] || make_env .venv-ray test,distributed
.venv-ray/bin/python -c "import ray, onnxruntime; print('ray', ray.__version__, 'onnxruntime', onnxruntime.__version__)"
run_marked ray .venv-ray ray
