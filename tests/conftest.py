"""Shared fixtures; slow tests run only in the CI lane that sets DLBRICKS_SLOW=1."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DLBRICKS_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run by the CI slow lane (DLBRICKS_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def calibrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with this machine's onnxruntime peaks calibrated once (calibrate's own budget, as
    ``evaluate`` calibrates: the quick one reads the bandwidth a quarter low, which can lift a tiny
    model's roofline above its lower bound): a test that copies it skips ``evaluate``'s calibration."""
    from dlbricks.benchmarks_db import Store
    from dlbricks.estimator import calibrate_peaks
    from dlbricks.estimator.api import peaks_key
    from dlbricks.estimator.calibrate import merge_peaks
    from dlbricks.generators import OrtConfig, collect_system_info

    db = tmp_path_factory.mktemp("calibrated") / "peaks.db"
    system = collect_system_info()
    with Store(db) as store:
        store.systems.record_peaks(system, *merge_peaks(None, peaks_key(OrtConfig()), calibrate_peaks()))
    return db


@pytest.fixture
def with_peaks(calibrated_db: Path, tmp_path: Path) -> Callable[[str], Path]:
    """``with_peaks(name)``: a fresh database file in the test's folder holding only the calibrated peaks."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile(calibrated_db, target)
        return target

    return copy
