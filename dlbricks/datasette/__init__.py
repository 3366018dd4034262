"""Datasette metadata for a brick database: table descriptions and canned queries.

A brick database is SQLite and opens in Datasette as it is. The metadata shipped here describes its
tables and adds canned queries (slowest bricks, models by the error of their brick sum, bricks by
op type, one model's bricks, noisiest bricks, failures). Datasette names a database after its
file, and metadata is keyed by that name: the shipped file (:data:`METADATA_PATH`) is keyed for
the default ``dlbricks.db``; :func:`metadata` keys it for other files::

    python -m dlbricks.datasette results.db -o metadata.json
    datasette results.db --metadata metadata.json

Datasette is not a dependency of dlbricks: install it where you browse (``pip install datasette``).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["METADATA_PATH", "metadata"]

#: The shipped metadata, keyed for a database file named ``dlbricks.db``.
METADATA_PATH = Path(__file__).with_name("metadata.json")
_DEFAULT_NAME = "dlbricks"


def metadata(*databases: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata keyed for each database file given (as Datasette names them: the file's name
    without its extension); for ``dlbricks.db`` without any."""
    with open(METADATA_PATH, encoding="utf-8") as f:
        meta = json.load(f)
    names = [Path(db).stem for db in databases] or [_DEFAULT_NAME]
    own = meta["databases"].pop(_DEFAULT_NAME)
    meta["databases"] = {name: copy.deepcopy(own) for name in names}
    return meta
