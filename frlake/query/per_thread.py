"""What a long-lived session keeps for the threads that read through it (the server's): one trusted DuckDB
connection with the lake's views (and one sandbox for users' SQL) per thread, rebuilt only when the catalog changed (building the views
costs a catalog read per table; a request should cost a query), and a small cache of values computed once
per catalog version."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class ThreadConnections:
    """One connection per thread from ``open_``, kept while the catalog's version is the same and it is
    open (a sandbox closes itself when a query changed its views)."""

    def __init__(self, open_: Callable[[], Any]):
        self._open = open_
        self._local = threading.local()
        self._all: set = set()  # every connection still open, for close()
        self._lock = threading.Lock()

    def get(self, version: Hashable) -> Any:
        cached = getattr(self._local, "entry", None)
        if cached is not None and cached[0] == version and not getattr(cached[1], "closed", False):
            return cached[1]
        if cached is not None:
            self._drop(cached[1])
        con = self._open()
        with self._lock:
            self._all.add(con)
        self._local.entry = (version, con)
        return con

    def _drop(self, con) -> None:
        with self._lock:
            self._all.discard(con)
        if not getattr(con, "closed", False):
            con.close()

    def close(self) -> None:
        with self._lock:
            connections, self._all = list(self._all), set()
        for con in connections:
            con.close()


class VersionedMemo:
    """``compute()`` once per (catalog version, key), the newest ``size`` kept (an LRU). The values are
    shared between threads: callers never change them."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, version: Hashable, key: Hashable, compute: Callable[[], Any]) -> Any:
        full = (version, key)
        with self._lock:
            if full in self._values:
                self._values.move_to_end(full)
                return self._values[full]
        value = compute()
        with self._lock:
            self._values[full] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value
