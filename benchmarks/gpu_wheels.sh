#!/usr/bin/env bash
# Here, before a loan of a GPU: the wheels the GPU machine lacks, in .gpu/ (ignored by git), for its
# Python 3.12. onnxruntime-gpu (about 255 MB) is split into parts of 55 MB, each small enough to
# travel with the working tree in one call of the device tool; benchmarks/gpu_checks.sh puts them
# together there.
#
#   bash benchmarks/gpu_wheels.sh            # then: ls .gpu/
set -euo pipefail
cd "$(dirname "$0")/.."
ORT_GPU=${ORT_GPU:-onnxruntime-gpu==1.31.1}
mkdir -p .gpu/wheels .gpu/parts
rm -f .gpu/parts/*
platforms=()
for n in 17 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
download() {  # NAME==VERSION ...: binary wheels for CPython 3.12 on x86-64, without their needs
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform any -d "$1" "${@:2}"
}
download .gpu/wheels sqlite-utils sqlite-fts4 click-default-group "click>=8.3.1"
download .gpu "$ORT_GPU"
wheel=$(ls .gpu/onnxruntime_gpu-*.whl)
split -b 55M "$wheel" ".gpu/parts/$(basename "$wheel")."
rm "$wheel"
ls -la .gpu/wheels .gpu/parts
