"""``store.claims``: the leases that let several processes fill one database without measuring an
item twice (table ``claims``)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql

from ._measurements import TABLES
from ._part import Part, guard
from .records import Claim, ClaimStatus

__all__ = ["Claims", "DEFAULT_LEASE_S", "HOST"]

#: Seconds a claim lasts unless renewed; ``populate`` derives its own from the budget.
DEFAULT_LEASE_S = 600.0
#: This machine's name, stored with claims: a claim of a dead process on this host is stale.
HOST = socket.gethostname()


class Claims(Part):
    """The claims of a :class:`~dlbricks.benchmarks_db.Store`, reached as ``store.claims``: who is
    measuring which item (a brick's signature or a model's key) for a system and configuration.

    ``owner`` defaults to the store's own (:attr:`Store.owner`).

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.claims.all()
    []
    """

    name = "claims"

    @guard
    def take(self, item: str, system: Any, config_id: str, owner: str | None = None,
             lease_s: float = DEFAULT_LEASE_S, *, kind: str = "brick",
             retry_failed: bool = False) -> ClaimStatus:
        """Try to take the lease on measuring ``item`` for a system and configuration.

        In one write transaction: if the item has a measurement (an ok one, with
        ``retry_failed``), return ``MEASURED``; if another owner holds a live lease, return
        ``HELD``; otherwise take or renew the lease until ``now + lease_s`` and return
        ``CLAIMED``. A lease is live until it expires, except that a lease of this host whose
        process is gone is stale at once (a killed ``bench`` does not block its bricks).
        """
        owner = owner or self.store.owner
        key = _rows.fingerprint_of(system)
        table = TABLES[kind]

        def tx() -> ClaimStatus:
            status = _sql.measured_status(self._db, table, item, key, config_id)
            if status == "ok" or (status is not None and not retry_failed):
                return ClaimStatus.MEASURED
            held = _sql.get_claim(self._db, item, key, config_id)
            now = time.time()
            if (held is not None and held["owner"] != owner and held["expires_at"] > now
                    and (held["host"] != HOST or _rows.pid_alive(held["pid"]))):
                return ClaimStatus.HELD
            _sql.put_claim(self._db, {"item": item, "kind": kind, "system": key, "config_id": config_id,
                                      "owner": owner, "host": HOST, "pid": os.getpid(),
                                      "claimed_at": now, "expires_at": now + lease_s})
            return ClaimStatus.CLAIMED

        return _sql.write(self._db, tx)

    @guard
    def release(self, item: str, system: Any, config_id: str, owner: str | None = None) -> None:
        """Drop the claim of ``owner`` on an item."""
        key, owner = _rows.fingerprint_of(system), owner or self.store.owner
        _sql.write(self._db, lambda: _sql.delete_claim(self._db, item, key, config_id, owner))

    @guard
    def release_all(self, owner: str | None = None) -> None:
        """Drop every claim of ``owner``."""
        owner = owner or self.store.owner
        _sql.write(self._db, lambda: _sql.delete_owner_claims(self._db, owner))

    @guard
    def all(self, *, live_only: bool = True) -> list[Claim]:
        """The claims in the database (only unexpired ones by default)."""
        now = time.time()
        rows = _sql.select(self._db, "claims", "claimed_at")
        return [Claim.from_row(r) for r in rows if not live_only or r["expires_at"] > now]
