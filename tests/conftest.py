"""Shared fixtures; slow tests run only in the CI lane that sets DLBRICKS_SLOW=1."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DLBRICKS_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run by the CI slow lane (DLBRICKS_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
