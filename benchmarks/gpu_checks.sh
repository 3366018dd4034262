#!/usr/bin/env bash
# There, on a lent GPU (the device tool's machine, its python3 the one with PyTorch and CUDA 13): the
# checks of docs/gpu.md in one prepared run, so that a loan of 15 minutes is enough.
#
#   bash benchmarks/gpu_checks.sh part           # one call per part of .gpu/parts (carry: .gpu), in a row
#   bash benchmarks/gpu_checks.sh run CHECK...   # the last call: install, then each CHECK in turn
#
# The parts wait in /tmp/dlbricks-parts between calls (the machine stays warm 30 s after each call).
# CHECKs: cuda (benchmarks/check_cuda.py), fused (evaluate at all, fused bricks, with --cuda-graph;
# fused2 the same again, into a database of its own), layer (evaluate, layer bricks at disable),
# batch8 (fused bricks at batch 8). Each writes what it
# printed and its database to $OUT; a check that passes its time limit is stopped and the next runs.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=/tmp/dlbricks-parts
out=${OUT:-/tmp/dlbricks-out}
mkdir -p "$parts" "$out"
if [ "${1:-}" = part ]; then
  cp -n .gpu/parts/* "$parts"/ && ls -la "$parts"
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: gpu_checks.sh part | run CHECK..." >&2; exit 2; }
shift
cp -n .gpu/parts/* "$parts"/ 2>/dev/null
wheel=$(ls "$parts" | sed -n 's/\.aa$//p')
cat "$parts/$wheel".* > "/tmp/$wheel"
site=/tmp/dlbricks-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target "$site" \
  "/tmp/$wheel" .gpu/wheels/*.whl . || exit 1  # dlbricks itself too: its packages map folders of this tree
export PYTHONPATH="$site" PYTHONUNBUFFERED=1
nvidia=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')/nvidia
export LD_LIBRARY_PATH="$(find "$nvidia" -type d -name lib | tr '\n' ':')${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
for check in "$@"; do
  start=$(date +%s)
  case $check in
    cuda) timeout 120 python3 benchmarks/check_cuda.py > "$out/cuda.txt" 2>&1 ;;
    fused*) timeout 300 python3 -m dlbricks evaluate --device cuda --opt-level all --granularity fused --cuda-graph \
              --db "$out/$check.db" --quiet > "$out/$check.txt" 2>&1 ;;
    layer) timeout 300 python3 -m dlbricks evaluate --device cuda --db "$out/layer.db" --quiet > "$out/layer.txt" 2>&1 ;;
    batch8) timeout 300 python3 -m dlbricks evaluate --device cuda --opt-level all --granularity fused --batch-size 8 \
              --db "$out/batch8.db" --quiet > "$out/batch8.txt" 2>&1 ;;
    *) echo "unknown check $check" >&2; continue ;;
  esac
  echo "$check: rc=$? in $(( $(date +%s) - start )) s"
  tail -n 12 "$out/$check.txt"
done
gzip -f "$out"/*.db 2>/dev/null
ls -la "$out"
