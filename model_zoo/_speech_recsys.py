"""Speech recognition: Wav2Letter (Collobert et al. 2016, torchaudio's definition) on MFCC frames or raw
waveform. Recommendation: DLRM (Naumov et al. 2019) with the Criteo Kaggle configuration, and NCF /
NeuMF (He et al. 2017) with the MLPerf MovieLens-20M configuration."""

from __future__ import annotations

import functools
import math

import numpy as np

from ._builder import GraphBuilder, Value
from .spec import ZooEntry, entry

__all__ = ["ENTRIES"]


# ----------------------------------------------------------------------------------- Wav2Letter
def _wav2letter(b: GraphBuilder, x: Value, *, waveform: bool, classes: int = 40) -> dict[str, Value]:
    if waveform:  # learnt front end: 250 filters of 250 samples, hop 160 (10 ms at 16 kHz)
        x = b.relu(b.conv(x, 250, 250, stride=160, padding=45, name="waveform"))
    # (out channels, kernel, stride, padding) : Collobert et al. 2016, Fig. 1
    layers = [(250, 48, 2, 23), *[(250, 7, 1, 3)] * 7, (2000, 32, 1, 16), (2000, 1, 1, 0), (classes, 1, 1, 0)]
    for i, (c, k, s, p) in enumerate(layers):
        x = b.relu(b.conv(x, c, k, stride=s, padding=p, name=f"acoustic.{2 * i}"))
    return {"log_probs": b.node("LogSoftmax", [x], [(x.shape, x.dtype)], axis=1)[0]}


# ----------------------------------------------------------------------------------- DLRM
# Criteo Kaggle cardinalities of the 26 categorical features (facebookresearch/dlrm), hashed to at
# most _MAX_INDEX rows each (--max-ind-range) so that the model stays under protobuf's 2 GB.
_KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
                5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
_MAX_INDEX = 1_000_000
_DLRM_ROWS = tuple(min(n, _MAX_INDEX) for n in _KAGGLE_ROWS)
_DLRM_DIM = 16
_DLRM_BOTTOM = (512, 256, 64, 16)
_DLRM_TOP = (512, 256, 1)


def _mlp(b: GraphBuilder, x: Value, widths: tuple[int, ...], prefix: str, last: str | None) -> Value:
    for i, w in enumerate(widths):
        x = b.linear(x, w, name=f"{prefix}.{i}")
        x = b.activation(x, last if i == len(widths) - 1 else "relu")
    return x


def _dlrm(b: GraphBuilder, dense: Value, *sparse: Value) -> dict[str, Value]:
    x = _mlp(b, dense, _DLRM_BOTTOM, "bot_l", "relu")
    embedded = [b.embedding(ids, rows, _DLRM_DIM, std=1.0 / math.sqrt(3.0 * rows), name=f"emb_l.{i}")
                for i, (ids, rows) in enumerate(zip(sparse, _DLRM_ROWS))]
    with b.scope("interaction"):  # pairwise dot products of the 27 vectors, strictly lower triangle
        t = b.concat([b.unsqueeze(v, [1]) for v in [x, *embedded]], axis=1)
        z = b.matmul(t, b.transpose(t, (0, 2, 1)))
        n = t.shape[1]
        rows, cols = np.tril_indices(n, k=-1)
        flat = b.reshape(z, (z.shape[0], n * n))
        pairs = b.gather(flat, b.ints(rows * n + cols, "tril_indices"), axis=1)
        z = b.concat([x, pairs], axis=1)
    return {"click_probability": _mlp(b, z, _DLRM_TOP, "top_l", "sigmoid")}


# ----------------------------------------------------------------------------------- NCF
_ML20M_USERS, _ML20M_ITEMS = 138_493, 26_744


def _ncf(b: GraphBuilder, user: Value, item: Value, *, factors: int = 64, layers: tuple[int, ...] = (256, 256, 128, 64)
         ) -> dict[str, Value]:
    std = 0.01
    gmf = b.mul(b.embedding(user, _ML20M_USERS, factors, std, name="mf_user_embed"),
                b.embedding(item, _ML20M_ITEMS, factors, std, name="mf_item_embed"))
    mlp = b.concat([b.embedding(user, _ML20M_USERS, layers[0] // 2, std, name="mlp_user_embed"),
                    b.embedding(item, _ML20M_ITEMS, layers[0] // 2, std, name="mlp_item_embed")], axis=1)
    mlp = _mlp(b, mlp, layers[1:], "mlp", "relu")
    logit = b.linear(b.concat([gmf, mlp], axis=1), 1, name="final")
    return {"score": b.sigmoid(logit)}


_SECONDS = 10  # utterance length of the speech models

ENTRIES: tuple[ZooEntry, ...] = (
    entry("wav2letter_mfcc", "speech_recognition", "wav2letter", (("mfcc", (1, 13, 100 * _SECONDS), "float32"),),
          23_304_540, "derived from torchaudio.models.Wav2Letter(input_type='mfcc', num_features=13)",
          functools.partial(_wav2letter, waveform=False),
          f"Wav2Letter on 13 MFCCs, {_SECONDS} s at 100 frames/s, 40 letters (Collobert et al. 2016)"),
    entry("wav2letter_waveform", "speech_recognition", "wav2letter",
          (("waveform", (1, 1, 16000 * _SECONDS), "float32"),), 26_211_290,
          "derived from torchaudio.models.Wav2Letter(input_type='waveform')",
          functools.partial(_wav2letter, waveform=True),
          f"Wav2Letter on raw 16 kHz audio, {_SECONDS} s, 40 letters (Collobert et al. 2016)"),
    entry("dlrm_criteo_kaggle", "recommendation", "dlrm",
          (("dense_features", (1, 13), "float32"), *((f"sparse_{i}", (1,), "int64") for i in range(26))),
          89_584_721, f"derived from facebookresearch/dlrm, Criteo Kaggle config, --max-ind-range={_MAX_INDEX}",
          _dlrm, "DLRM (Naumov et al. 2019): bottom MLP 13-512-256-64-16, 26 embedding tables of dim 16, "
                 "dot interaction, top MLP 367-512-256-1",
          {f"sparse_{i}": (0, n) for i, n in enumerate(_DLRM_ROWS)}),
    entry("ncf_ml20m", "recommendation", "ncf", (("user", (1,), "int64"), ("item", (1,), "int64")), 31_832_577,
          "derived from the MLPerf NCF reference (NeuMF, factors 64, MLP 256-256-128-64)", _ncf,
          "NeuMF (He et al. 2017) for MovieLens-20M: GMF and MLP towers, 138,493 users, 26,744 items",
          {"user": (0, _ML20M_USERS), "item": (0, _ML20M_ITEMS)}),
)
