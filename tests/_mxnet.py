"""What every MXNet test module starts with: its marks, and mxnet imported (or the module skipped)."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

MARKS = [pytest.mark.mxnet, pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")]
# a module that times nothing: CI runs it beside other work
UNTIMED_MARKS = [*MARKS, pytest.mark.untimed]


def import_mxnet() -> ModuleType:
    """mxnet, with oneDNN graph fusion off (every layer runs alone); skips the calling module
    with a reason when the mxnet extra is not installed (the core lane)."""
    os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
    return pytest.importorskip("mxnet", reason="needs the mxnet extra (pip install 'dlbricks[mxnet]')")
