"""The one cache facility: a bounded map of built values, keyed by content or by a stable key
(a template's text, a tool set's signature, a model's path), never by an object's id, which
Python may reuse once the object is gone. Least recently used out; safe across threads (a value
may be built twice by two threads at once; both builds are equal, and one is kept)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], V]) -> V:
        """The value kept for `key`, built by `build()` the first time."""
        try:  # a hit takes no lock: each of these dict operations is atomic
            value = self._values[key]
            self._values.move_to_end(key)
            return value
        except KeyError:  # not there (or dropped by another thread just now)
            pass
        value = build()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def find(self, key: Hashable) -> V | None:
        """The value kept for `key`, or None (nothing is built or kept)."""
        return self._values.get(key)
