"""Verify the CUDA path on a machine with an NVIDIA GPU and onnxruntime-gpu alone (README, "On a GPU").

Prepares a Conv brick on the device (inputs and outputs bound on the GPU, synchronized), checks the
session runs on CUDAExecutionProvider and the output shape, then benchmarks a few zoo bricks and one
whole model on CUDA in a worker, printing their medians and their launch-queue times (the host's
time to issue a run, the device's to run it, what a further copy adds to a run of several:
``dlbricks.generators._cuda``). No CI lane has a GPU:
run this by hand, then ``dlbricks evaluate --device cuda`` for the main job there.

    python benchmarks/check_cuda.py

Last run on an H100 80GB HBM3 (onnxruntime-gpu 1.31.1, CUDA 13): before bricks ran as one session on
CUDA, its ten bricks took 116-4308 us each against 0.98 ms for the whole ResNet-18 (each of 128 cold
copies with its own provider; see ``CUDA_COPIES`` in ``dlbricks.generators.ort``).
"""

from __future__ import annotations

import onnxruntime as ort

import dlbricks
from dlbricks.generators import Budget, OrtConfig, benchmark, collect_system_info
from dlbricks.generators.api import calibrate_floor
from dlbricks.generators.ort import OrtBackend
from dlbricks.model_zoo import build


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e6 * seconds:.1f}"


def main() -> None:
    info = collect_system_info()
    print(f"machine: {info.cpu_model}; GPU: {info.to_dict().get('gpu_name')}; providers: "
          f"{ort.get_available_providers()}")
    config = OrtConfig(device="cuda", cudnn_conv_algo_search="EXHAUSTIVE")
    dec = dlbricks.decompose(build("resnet18_v1"))
    conv = next(b for b in dec.bricks.values() if b.op_type == "Conv")
    prepared = OrtBackend().prepare(conv.to_onnx(), config)
    prepared.run()
    assert prepared.session.get_providers()[0] == "CUDAExecutionProvider", prepared.session.get_providers()
    assert tuple(prepared.outputs()[0].shape) == conv.outputs[0].shape
    print("CUDA brick prepared, bound on the device, ran:", conv.op_type, conv.outputs[0])
    floor = calibrate_floor(config, Budget.quick())
    print(f"floor {_us(floor.floor_s)} us (a run with no node)")
    bricks = list(dec.bricks.values())[:10]
    print("  brick                status   median us   host us  device us  warm us  repeat us  (launch queue)")
    for brick, m in zip(bricks, benchmark(bricks, config=config, budget=Budget.quick()), strict=True):
        print(f"  {brick.op_type:20s} {m.status:7s} {_us(m.median_s):>10} {_us(m.host_s):>9} {_us(m.device_s):>10} "
              f"{_us(m.device_warm_s):>8} {_us(m.repeat_s):>10}")
    (whole,) = benchmark([dlbricks.load_model(build("resnet18_v1"))], config=config, budget=Budget.quick())
    print(f"resnet18_v1 whole model on CUDA: {whole.status} median {1e3 * (whole.median_s or 0):.3f} ms")


if __name__ == "__main__":
    main()
