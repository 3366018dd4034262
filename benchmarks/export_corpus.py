"""Models as users export them: a corpus of ONNX files built locally from PyTorch, random weights.

Usage (needs the ``export`` extra: torch, transformers, onnxscript)::

    python benchmarks/export_corpus.py --out DIR [--only NAME,...] [--sequence-model]

Every model is built from a configuration with random, seeded weights (nothing is downloaded):
transformers models from their ``Config`` classes (BERT, ALBERT -- one layer's weights shared by every
layer --, DistilBERT, GPT-2 with tied embeddings, ViT, Wav2Vec2), torchvision's CNNs (ResNet-18,
MobileNetV3-Small, EfficientNet-B0, written here as torchvision writes them: torchvision's wheel for
torch 2.13 needs torch's CUDA build)
and a hand-written module that calls one ``nn.Linear`` several times (a second model with shared
weights). Each is exported at fixed input shapes by ``torch.onnx.export(..., dynamo=False)``
(TorchScript) and/or ``torch.onnx.export(..., dynamo=True)`` (torch.export + onnxscript); three more are
quantized by onnxruntime: ``quantize_dynamic`` on a transformer, ``quantize_static`` (QDQ, calibrated on
seeded random data) on two CNNs.

``DIR`` gets each model's ``NAME.onnx`` and ``corpus.json``: a list of ``{name, exporter, kind, file,
inputs}`` (kind: fp32, quantized-dynamic, qdq or shared-weights; inputs: name -> shape). Each export is
checked by ``onnx.checker`` and loaded by onnxruntime; a model an exporter fails on is reported in one
line and skipped. Exports already in ``DIR`` are kept (``corpus.json`` is rewritten with every model
there).

With ``--sequence-model``, ``DIR/bert_ts_seq.onnx`` is exported too (not listed in ``corpus.json``): the
BERT of the corpus with positions for 512 tokens and its sequence dimension left symbolic
(``dynamic_axes``), for sequence-length sweeps (``dlbricks validate FILE --input-shape
'input_ids=1,{64,128,256,512}' --input-shape 'attention_mask=1,{64,128,256,512}'``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SEQ = 128  # tokens of the text models
IMAGE = 224  # side of the images
AUDIO = 16000  # samples of the audio model (one second)


@dataclass
class Entry:
    """One model of the corpus, as ``corpus.json`` lists it."""

    name: str
    exporter: str  # torchscript, dynamo or the exporter of the model a quantized one comes from
    kind: str  # fp32, quantized-dynamic, qdq, shared-weights
    file: str
    inputs: dict[str, list[int]]


@dataclass
class Spec:
    """How to build one torch model: its module, its example inputs, the exporter and kind."""

    build: Callable[[], tuple[object, dict[str, object]]]  # -> (module, {input name: tensor})
    exporter: str
    kind: str = "fp32"


# --- models -------------------------------------------------------------------------------------


def _tokens(vocab: int = 1000) -> dict[str, object]:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, SEQ), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones(1, SEQ, dtype=torch.int64)}


class _LastHidden:
    """Wraps a transformers model so that it returns only its last hidden state (one plain output)."""

    def __new__(cls, model: object) -> object:
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, *args: torch.Tensor) -> torch.Tensor:
                out = self.inner(*args, return_dict=True)
                return out.logits if hasattr(out, "logits") and out.logits is not None else out.last_hidden_state

        return Wrapped(model).eval()


def _text(config_name: str, model_name: str, **config: object) -> Callable[[], tuple[object, dict[str, object]]]:
    def build() -> tuple[object, dict[str, object]]:
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        cfg._attn_implementation = "eager"
        return _LastHidden(getattr(transformers, model_name)(cfg).eval()), _tokens(int(config["vocab_size"]))

    return build


def _bert(positions: int = SEQ) -> tuple[object, dict[str, object]]:
    return _text("BertConfig", "BertModel", vocab_size=1000, hidden_size=256, num_hidden_layers=4,
                 num_attention_heads=4, intermediate_size=1024, max_position_embeddings=positions)()


def _albert() -> tuple[object, dict[str, object]]:
    # one layer's weights for all 4 layers (ALBERT shares them)
    return _text("AlbertConfig", "AlbertModel", vocab_size=1000, embedding_size=128, hidden_size=256,
                 num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                 max_position_embeddings=SEQ)()


def _distilbert() -> tuple[object, dict[str, object]]:
    return _text("DistilBertConfig", "DistilBertModel", vocab_size=1000, dim=256, n_layers=4, n_heads=4,
                 hidden_dim=1024, max_position_embeddings=SEQ)()


def _gpt2() -> tuple[object, dict[str, object]]:
    import torch
    import transformers

    cfg = transformers.GPT2Config(vocab_size=1000, n_embd=256, n_layer=4, n_head=4, n_positions=SEQ,
                                  tie_word_embeddings=True, use_cache=False)
    cfg._attn_implementation = "eager"
    model = transformers.GPT2LMHeadModel(cfg).eval()  # lm_head shares the token embedding's weight

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, use_cache=False, return_dict=True).logits

    return Logits().eval(), {"input_ids": _tokens(1000)["input_ids"]}


def _vit() -> tuple[object, dict[str, object]]:
    import torch
    import transformers

    cfg = transformers.ViTConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                 intermediate_size=1024, image_size=IMAGE, patch_size=16)
    cfg._attn_implementation = "eager"
    model = _LastHidden(transformers.ViTModel(cfg, add_pooling_layer=False).eval())
    return model, {"pixel_values": torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))}


def _wav2vec2() -> tuple[object, dict[str, object]]:
    import torch
    import transformers

    cfg = transformers.Wav2Vec2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                      intermediate_size=1024, conv_dim=(256,) * 7, do_stable_layer_norm=True,
                                      feat_extract_norm="layer", num_conv_pos_embeddings=64)
    cfg._attn_implementation = "eager"
    model = _LastHidden(transformers.Wav2Vec2Model(cfg).eval())
    return model, {"input_values": torch.randn(1, AUDIO, generator=torch.Generator().manual_seed(0))}


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: str | None = "relu") -> object:
    from torch import nn

    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append({"relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU}[act]())
    return nn.Sequential(*layers)


def _resnet18_module() -> object:
    """ResNet-18 as torchvision writes it (BasicBlock, [2, 2, 2, 2]): written here, torchvision's wheel
    for torch 2.13 needs the CUDA build of torch."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.a = _conv_bn(cin, cout, 3, stride)
            self.b = _conv_bn(cout, cout, 3, 1, act=None)
            self.down = _conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.b(self.a(x)) + self.down(x))

    blocks, cin = [], 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        blocks += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    return nn.Sequential(_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), *blocks, nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(512, 1000))


class _SE:
    def __new__(cls, c: int, squeeze: int, gate: str) -> object:
        import torch
        from torch import nn

        class SE(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
                self.act = nn.ReLU() if gate == "hardsigmoid" else nn.SiLU()
                self.gate = nn.Hardsigmoid() if gate == "hardsigmoid" else nn.Sigmoid()

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
                return x * self.gate(self.fc2(self.act(self.fc1(s))))

        return SE()


def _inverted(cin: int, exp: int, cout: int, k: int, stride: int, se: int, act: str, gate: str) -> object:
    """An inverted residual block (MobileNetV3's, EfficientNet's MBConv): expand, depthwise, SE, project."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            parts = [_conv_bn(cin, exp, 1, act=act)] if exp != cin else []
            parts.append(_conv_bn(exp, exp, k, stride, groups=exp, act=act))
            if se:
                parts.append(_SE(exp, se, gate))
            parts.append(_conv_bn(exp, cout, 1, act=None))
            self.body = nn.Sequential(*parts)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return x + y if self.residual else y

    return Block()


def _mobilenet_v3_small_module() -> object:
    """MobileNetV3-Small as torchvision writes it (its 11 blocks, SE with hardsigmoid, hardswish)."""
    from torch import nn

    rows = [  # cin, exp, cout, k, stride, se squeeze, activation
        (16, 16, 16, 3, 2, 8, "relu"), (16, 72, 24, 3, 2, 0, "relu"), (24, 88, 24, 3, 1, 0, "relu"),
        (24, 96, 40, 5, 2, 24, "hardswish"), (40, 240, 40, 5, 1, 64, "hardswish"),
        (40, 240, 40, 5, 1, 64, "hardswish"), (40, 120, 48, 5, 1, 32, "hardswish"),
        (48, 144, 48, 5, 1, 40, "hardswish"), (48, 288, 96, 5, 2, 72, "hardswish"),
        (96, 576, 96, 5, 1, 144, "hardswish"), (96, 576, 96, 5, 1, 144, "hardswish")]
    blocks = [_inverted(*r, gate="hardsigmoid") for r in rows]
    return nn.Sequential(_conv_bn(3, 16, 3, 2, act="hardswish"), *blocks, _conv_bn(96, 576, 1, act="hardswish"),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(576, 1024), nn.Hardswish(),
                         nn.Linear(1024, 1000))


def _efficientnet_b0_module() -> object:
    """EfficientNet-B0 as torchvision writes it (MBConv stages, SiLU, SE with sigmoid; no stochastic depth)."""
    from torch import nn

    stages = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
              (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    blocks = []
    for ratio, k, stride, cin, cout, n in stages:
        for i in range(n):
            c = cin if i == 0 else cout
            blocks.append(_inverted(c, c * ratio, cout, k, stride if i == 0 else 1, max(1, c // 4), "silu",
                                    gate="sigmoid"))
    return nn.Sequential(_conv_bn(3, 32, 3, 2, act="silu"), *blocks, _conv_bn(320, 1280, 1, act="silu"),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000))


def _vision(name: str, size: int = IMAGE) -> Callable[[], tuple[object, dict[str, object]]]:
    def build() -> tuple[object, dict[str, object]]:
        import torch

        torch.manual_seed(0)
        model = globals()[f"_{name}_module"]().eval()
        with torch.no_grad():  # BatchNorm statistics of random weights: not the identity
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        return model, {"input": torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))}

    return build


def _shared_mlp() -> tuple[object, dict[str, object]]:
    """One ``nn.Linear`` applied four times (with a residual and a GELU between): one weight, four MatMuls."""
    import torch

    class SharedMLP(torch.nn.Module):
        def __init__(self, width: int = 512, repeats: int = 4) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(256, width)
            self.shared = torch.nn.Linear(width, width)
            self.norm = torch.nn.LayerNorm(width)
            self.out = torch.nn.Linear(width, 10)
            self.repeats = repeats

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.inp(x)
            for _ in range(self.repeats):
                h = h + torch.nn.functional.gelu(self.shared(self.norm(h)))
            return self.out(h)

    torch.manual_seed(0)
    return SharedMLP().eval(), {"x": torch.randn(1, SEQ, 256, generator=torch.Generator().manual_seed(0))}


#: name -> how it is built and exported (quantized models are in QUANTIZED).
MODELS: dict[str, Spec] = {
    "bert_ts": Spec(_bert, "torchscript"),
    "bert_dynamo": Spec(_bert, "dynamo"),
    "albert_ts": Spec(_albert, "torchscript", "shared-weights"),
    "distilbert_dynamo": Spec(_distilbert, "dynamo"),
    "gpt2_dynamo": Spec(_gpt2, "dynamo", "shared-weights"),  # TorchScript: no ONNX aten::diff (masking_utils)
    "vit_dynamo": Spec(_vit, "dynamo"),
    "wav2vec2_ts": Spec(_wav2vec2, "torchscript"),
    "resnet18_ts": Spec(_vision("resnet18"), "torchscript"),
    "resnet18_dynamo": Spec(_vision("resnet18"), "dynamo"),
    "mobilenet_v3_small_ts": Spec(_vision("mobilenet_v3_small"), "torchscript"),
    "efficientnet_b0_dynamo": Spec(_vision("efficientnet_b0", 160), "dynamo"),
    "shared_mlp_ts": Spec(_shared_mlp, "torchscript", "shared-weights"),
}

#: quantized name -> (the fp32 model it comes from, the kind of quantization).
QUANTIZED: dict[str, tuple[str, str]] = {
    "bert_ts_qdynamic": ("bert_ts", "quantized-dynamic"),
    "resnet18_ts_qdq": ("resnet18_ts", "qdq"),
    "mobilenet_v3_small_ts_qdq": ("mobilenet_v3_small_ts", "qdq"),
}


# --- export -------------------------------------------------------------------------------------


def export_torch(spec: Spec, path: Path) -> dict[str, list[int]]:
    """Export the model of ``spec`` to ``path`` by its exporter; its inputs' names and shapes."""
    import torch

    model, inputs = spec.build()
    args = tuple(inputs.values())
    names = list(inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=names, output_names=["output"],
                              opset_version=17, dynamo=False)
        else:
            program = torch.onnx.export(model, args, input_names=names, output_names=["output"], dynamo=True,
                                        external_data=False)
            program.save(str(path), external_data=False)
    return {name: list(t.shape) for name, t in inputs.items()}


def export_sequence_model(path: Path, max_tokens: int = 512) -> None:
    """The corpus's BERT, positions for ``max_tokens`` tokens, exported by TorchScript with its
    sequence dimension symbolic (``sequence``), to ``path``."""
    import torch

    model, inputs = _bert(max_tokens)
    axes = {name: {1: "sequence"} for name in inputs}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(inputs.values()), str(path), input_names=list(inputs), output_names=["output"],
                          dynamic_axes={**axes, "output": {1: "sequence"}}, opset_version=17, dynamo=False)


def check(path: Path) -> None:
    """``onnx.checker`` on the file, then one onnxruntime run on zeros of its inputs' shapes."""
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        dtype = np.int64 if "int64" in i.type else np.float32
        feeds[i.name] = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], dtype=dtype)
    sess.run(None, feeds)


class _RandomReader:
    """A ``CalibrationDataReader`` over seeded random inputs of fixed shapes."""

    def __new__(cls, inputs: dict[str, list[int]], batches: int = 8) -> object:
        from onnxruntime.quantization import CalibrationDataReader

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self.data = iter([{n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
                                  for _ in range(batches)])

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.data, None)

        return Reader()


def quantize(source: Path, path: Path, kind: str, inputs: dict[str, list[int]]) -> None:
    """Quantize ``source`` into ``path``: dynamic (int8 weights) or static QDQ calibrated on random data."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = path.with_suffix(".pre.onnx")
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    try:
        if kind == "quantized-dynamic":
            quantize_dynamic(str(prepared), str(path), weight_type=QuantType.QInt8)
        else:
            quantize_static(str(prepared), str(path), _RandomReader(inputs), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    finally:
        prepared.unlink(missing_ok=True)


def _one_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def build(out: Path, names: list[str]) -> list[Entry]:
    """Export (or keep) each model of ``names`` into ``out``; the entries of those that load."""
    out.mkdir(parents=True, exist_ok=True)
    listing = out / "corpus.json"
    known = {e["name"]: Entry(**e) for e in json.loads(listing.read_text())} if listing.exists() else {}
    for name in names:
        path = out / f"{name}.onnx"
        start = time.perf_counter()
        try:
            if name in MODELS:
                spec = MODELS[name]
                if not (path.exists() and name in known):
                    inputs = export_torch(spec, path)
                    check(path)
                    known[name] = Entry(name, spec.exporter, spec.kind, path.name, inputs)
            else:
                source, kind = QUANTIZED[name]
                if source not in known:
                    raise RuntimeError(f"needs {source}, which is not in the corpus")
                if not (path.exists() and name in known):
                    quantize(out / known[source].file, path, kind, known[source].inputs)
                    check(path)
                    known[name] = Entry(name, known[source].exporter, kind, path.name, known[source].inputs)
        except Exception as e:  # noqa: BLE001 -- one line per failed model, then go on
            print(f"FAILED {name}: {_one_line(e)}", flush=True)
            known.pop(name, None)
            path.unlink(missing_ok=True)
            continue
        size = path.stat().st_size / 1e6
        print(f"{name}: {known[name].exporter}, {known[name].kind}, {size:.1f} MB, "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    entries = [known[n] for n in [*MODELS, *QUANTIZED] if n in known] + \
        [e for n, e in known.items() if n not in MODELS and n not in QUANTIZED]
    listing.write_text(json.dumps([asdict(e) for e in entries], indent=2) + "\n")
    return entries


def main(argv: list[str] | None = None) -> list[Entry]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the corpus")
    parser.add_argument("--only", default=None, help="comma-separated slice of: " + ",".join([*MODELS, *QUANTIZED]))
    parser.add_argument("--sequence-model", action="store_true",
                        help="also export bert_ts_seq.onnx, its sequence length symbolic, for sweeps")
    args = parser.parse_args(argv)
    if args.sequence_model:
        args.out.mkdir(parents=True, exist_ok=True)
        export_sequence_model(args.out / "bert_ts_seq.onnx")
        check(args.out / "bert_ts_seq.onnx")
        print(f"bert_ts_seq: {args.out / 'bert_ts_seq.onnx'}, sequence length symbolic")
    names = args.only.split(",") if args.only else [*MODELS, *QUANTIZED]
    unknown = [n for n in names if n not in MODELS and n not in QUANTIZED]
    if unknown:
        parser.error(f"unknown models {unknown}")
    entries = build(args.out, names)
    print(f"{len(entries)} models in {args.out / 'corpus.json'}")
    return entries


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
