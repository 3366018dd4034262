"""dlbricks.benchmarks_db: the brick database.

One SQLite file (WAL mode, readable with the ``sqlite-utils`` CLI and Datasette) holds the
systems, backend configurations, bricks (with their compact ONNX), models with their brick
occurrences and DAGs, and the measurements of bricks and whole models. :class:`Store` opens it
and reads and writes it through its parts (``store.bricks``, ``store.models``, ``store.systems``,
``store.measurements``, ``store.claims``); :func:`populate` fills it, one brick at a time,
resumably and safely from several processes at once (claims with leases), here or, with a
:class:`~dlbricks.benchmarks_db.ray.RayExecutor`, on the nodes of a Ray cluster;
:meth:`Store.merge_from` merges files from several machines.

The names below are what a user needs first. The public submodules hold the rest: ``store``
(the default path, leases, the classes of the store's parts), ``records`` (the records a store returns), ``jobs`` (executors, progress
and reports of :func:`populate`), ``schedule`` (what to measure again), ``rounds`` (models with their
bricks in rounds), ``ray`` (the Ray executor), ``export`` and ``sql`` (exports, merge rules). Modules
whose names start with ``_`` are private.

Examples
--------
>>> from dlbricks.benchmarks_db import Store
>>> with Store(":memory:") as store:
...     store.schema_version > 0
True
"""

from ._populate import populate
from .jobs import BenchOptions
from .store import Store

__all__ = [
    # the store
    "Store",
    # filling it
    "populate",
    "BenchOptions",
]
