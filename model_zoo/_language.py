"""Language models: BERT-base/large encoders (Devlin et al. 2019), GPT-2 small/medium decoders
(Radford et al. 2019) and the medium/large LSTM language models of Zaremba et al. 2014.

The transformers are written as Hugging Face's exports look at opset 17: embedding Gathers over int64
ids, attention with Reshape/Transpose/MatMul/Softmax, GELU as an Erf (BERT) or tanh (GPT-2) formula.
GPT-2's head splits and merges use the dynamic ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``
chain of PyTorch exports."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ._builder import FLOAT, GraphBuilder, Value
from .spec import InputSpec, ZooEntry, entry

__all__ = ["ENTRIES"]

_INIT_STD = 0.02  # BERT and GPT-2 initializer_range
_Reshape = Callable[[Value], Value]


def _token_inputs(seq: int, *names: str) -> tuple[InputSpec, ...]:
    return tuple((n, (1, seq), "int64") for n in names)


def _attention(b: GraphBuilder, q: Value, k: Value, v: Value, split: _Reshape, merge: _Reshape,
               mask: Value | None = None, causal: Value | None = None) -> Value:
    """Scaled dot-product attention over (batch, seq, hidden) projections.

    ``split`` reshapes a projection to (batch, seq, heads, head_dim), ``merge`` reshapes back; ``mask``
    is added to the scores, ``causal`` (bool) selects the scores that are kept.
    """
    q = b.transpose(split(q), (0, 2, 1, 3))
    k = b.transpose(split(k), (0, 2, 3, 1))
    v = b.transpose(split(v), (0, 2, 1, 3))
    scores = b.div(b.matmul(q, k), math.sqrt(q.shape[-1]))
    if causal is not None:
        scores = b.where(causal, scores, b.const(np.float32(np.finfo(np.float32).min), "mask_value"))
    if mask is not None:
        scores = b.add(scores, mask)
    context = b.transpose(b.matmul(b.softmax(scores, axis=-1), v), (0, 2, 1, 3))
    return merge(context)


# ----------------------------------------------------------------------------------- BERT
def _bert(b: GraphBuilder, input_ids: Value, token_type_ids: Value, attention_mask: Value, *, layers: int,
          hidden: int, heads: int, vocab: int = 30522, max_positions: int = 512) -> dict[str, Value]:
    batch, seq = input_ids.shape
    head_dim = hidden // heads
    with b.scope("embeddings"):
        x = b.add(b.embedding(input_ids, vocab, hidden, name="word_embeddings"),
                  b.embedding(token_type_ids, 2, hidden, name="token_type_embeddings"))
        positions = b.ints(np.arange(seq, dtype=np.int64)[None], "position_ids")
        x = b.add(x, b.embedding(positions, max_positions, hidden, name="position_embeddings"))
        x = b.layer_norm(x, eps=1e-12, name="LayerNorm")
    with b.scope("extended_attention_mask"):  # (1 - mask) * -10000, broadcast over heads and queries
        mask = b.cast(b.unsqueeze(attention_mask, [1, 2]), FLOAT)
        mask = b.mul(b.sub(1.0, mask), -10000.0)

    def split(t: Value) -> Value:
        return b.reshape(t, (batch, seq, heads, head_dim))

    def merge(t: Value) -> Value:
        return b.reshape(t, (batch, seq, hidden))

    for i in range(layers):
        with b.scope(f"encoder.layer.{i}"):
            q, k, v = (b.linear(x, hidden, std=_INIT_STD, name=n) for n in ("query", "key", "value"))
            context = _attention(b, q, k, v, split, merge, mask=mask)
            x = b.layer_norm(b.add(b.linear(context, hidden, std=_INIT_STD, name="attention.output.dense"), x),
                             eps=1e-12, name="attention.output.LayerNorm")
            y = b.gelu(b.linear(x, 4 * hidden, std=_INIT_STD, name="intermediate.dense"))
            x = b.layer_norm(b.add(b.linear(y, hidden, std=_INIT_STD, name="output.dense"), x), eps=1e-12,
                             name="output.LayerNorm")
    with b.scope("pooler"):
        pooled = b.tanh(b.linear(b.gather(x, 0, axis=1), hidden, std=_INIT_STD, name="dense"))
    return {"last_hidden_state": x, "pooler_output": pooled}


# ----------------------------------------------------------------------------------- GPT-2
def _dynamic_reshape(b: GraphBuilder, x: Value, like: Value, tail: tuple[int, ...]) -> Value:
    """Reshape to ``like``'s (batch, seq) followed by ``tail``, the way PyTorch exports ``view``:
    Shape -> Gather -> Unsqueeze per kept dim, Concat with the constant tail, Reshape."""
    shape = b.shape_of(like)
    dims = [b.unsqueeze(b.gather(shape, i), [0]) for i in range(2)]
    target = b.concat([*dims, b.ints(list(tail), "tail")], axis=0)
    return b.node("Reshape", [x, target], [((*like.shape[:2], *tail), x.dtype)])[0]


def _gpt2(b: GraphBuilder, input_ids: Value, *, layers: int, hidden: int, heads: int, vocab: int = 50257,
          max_positions: int = 1024) -> dict[str, Value]:
    seq = input_ids.shape[1]
    wte = b.weight((vocab, hidden), _INIT_STD, name="wte.weight")
    positions = b.ints(np.arange(seq, dtype=np.int64)[None], "position_ids")
    x = b.add(b.gather(wte, input_ids), b.embedding(positions, max_positions, hidden, std=0.01, name="wpe"))
    causal = b.const(np.tril(np.ones((seq, seq), dtype=bool))[None, None], "causal_mask")
    proj_std = _INIT_STD / math.sqrt(2 * layers)  # GPT-2's scaled init of residual projections
    for i in range(layers):
        with b.scope(f"h.{i}"):
            h = b.layer_norm(x, name="ln_1")
            q, k, v = b.split(b.linear(h, 3 * hidden, std=_INIT_STD, name="attn.c_attn"), [hidden] * 3, axis=2)

            def split(t: Value, like: Value = h) -> Value:
                return _dynamic_reshape(b, t, like, (heads, hidden // heads))

            def merge(t: Value, like: Value = h) -> Value:
                return _dynamic_reshape(b, t, like, (hidden,))

            context = _attention(b, q, k, v, split, merge, causal=causal)
            x = b.add(x, b.linear(context, hidden, std=proj_std, name="attn.c_proj"))
            h = b.layer_norm(x, name="ln_2")
            h = b.gelu(b.linear(h, 4 * hidden, std=_INIT_STD, name="mlp.c_fc"), approximate=True)
            x = b.add(x, b.linear(h, hidden, std=proj_std, name="mlp.c_proj"))
    x = b.layer_norm(x, name="ln_f")
    with b.scope("lm_head"):  # tied to wte: Gemm(transB=1) reads the embedding table as is
        flat = b.reshape(x, (-1, hidden))
        logits = b.node("Gemm", [flat, wte], [((flat.shape[0], vocab), FLOAT)], transB=1)[0]
        logits = b.reshape(logits, (*input_ids.shape, vocab))
    return {"logits": logits}


# ----------------------------------------------------------------------------------- LSTM LM
def _lstm_lm(b: GraphBuilder, input_ids: Value, *, hidden: int, layers: int = 2,
             vocab: int = 10000) -> dict[str, Value]:
    std = 0.1 / math.sqrt(3.0)  # uniform(-0.1, 0.1), as in PyTorch's word_language_model
    x = b.transpose(b.embedding(input_ids, vocab, hidden, std=std, name="encoder"), (1, 0, 2))
    for i in range(layers):
        x = b.lstm(x, hidden, name=f"rnn.l{i}")
    x = b.transpose(x, (1, 0, 2))
    return {"logits": b.linear(x, vocab, std=std, name="decoder")}


_BERT = {"base": (12, 768, 12, 109_482_240), "large": (24, 1024, 16, 335_141_888)}
_GPT2 = {"": (12, 768, 12, 124_439_808), "_medium": (24, 1024, 16, 354_823_168)}
_LSTM = {"medium": (650, 19_780_400), "large": (1500, 66_034_000)}
_SEQ = 128
_BPTT = 35

ENTRIES: tuple[ZooEntry, ...] = (
    *(entry(f"bert_{size}", "language", "bert", _token_inputs(_SEQ, "input_ids", "token_type_ids", "attention_mask"),
            params, f"Hugging Face bert-{size}-uncased BertModel (with pooler)",
            functools.partial(_bert, layers=n, hidden=d, heads=h),
            f"BERT-{size} encoder, {n} layers, hidden {d}, {h} heads (Devlin et al. 2019), sequence {_SEQ}",
            {"input_ids": (0, 30522), "token_type_ids": (0, 2), "attention_mask": (0, 2)})
      for size, (n, d, h, params) in _BERT.items()),
    *(entry(f"gpt2{size}", "language", "gpt2", _token_inputs(_SEQ, "input_ids"), params,
            f"Hugging Face gpt2{size.replace('_', '-')} (LM head tied to wte)",
            functools.partial(_gpt2, layers=n, hidden=d, heads=h),
            f"GPT-2{size.replace('_', ' ')} decoder with causal mask and tied LM head, {n} layers (Radford et al. "
            f"2019), sequence {_SEQ}", {"input_ids": (0, 50257)})
      for size, (n, d, h, params) in _GPT2.items()),
    *(entry(f"lstm_lm_{size}", "language", "lstm", _token_inputs(_BPTT, "input_ids"), params,
            "derived from PyTorch examples word_language_model (Zaremba et al. 2014: ~20M / ~66M)",
            functools.partial(_lstm_lm, hidden=hidden),
            f"2-layer LSTM language model, {hidden} units, 10k-word PTB vocabulary (Zaremba et al. 2014 "
            f"{size}), {_BPTT} steps", {"input_ids": (0, 10000)})
      for size, (hidden, params) in _LSTM.items()),
)
