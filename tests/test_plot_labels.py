"""The suite picture's labels: placed so that two models of about the same latency stay readable."""

from __future__ import annotations

import math

from dlbricks.estimator.plot import label_offsets

PPD = 170.0  # points per decade of a 6.4 in figure's axes spanning about two decades
LINE = 7.0 * 1.25


def _baselines(x: list[float], y: list[float], offsets: list[float]) -> list[float]:
    return [math.log10(yi) * PPD + dy for yi, dy in zip(y, offsets, strict=True)]


def test_labels_far_apart_stay_where_they_are() -> None:
    assert label_offsets([2.0, 20.0, 200.0], [2.1, 19.0, 210.0], ["a", "b", "c"], points_per_decade=PPD) == [0, 0, 0]


def test_labels_of_two_models_of_the_same_latency_move_a_line_apart() -> None:
    # bert_base 255.3 ms and wav2letter_mfcc 256.0 ms measured, 245.7 and 247.1 ms estimated: one label over the other
    x, y = [255.3, 256.0, 79.8, 82.8], [245.7, 247.1, 83.9, 85.4]
    names = ["bert_base", "wav2letter_mfcc", "densenet121", "yolov3_tiny"]
    offsets = label_offsets(x, y, names, points_per_decade=PPD)
    base = _baselines(x, y, offsets)
    assert abs(base[0] - base[1]) >= LINE - 1e-9
    assert abs(base[2] - base[3]) >= LINE - 1e-9
    assert sum(1 for dy in offsets if dy) == 2  # one label of each pair moved, the other kept
