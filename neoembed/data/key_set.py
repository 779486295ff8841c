"""The set of (query, positive) pair keys a build has kept, in 8 bytes a slot.

Dedup is the one part of stage 1 whose state grows with the rows: every kept pair's key must be remembered
until the build ends. A Python set of 64-bit ints costs about 66 bytes a key (a 36-byte int object and about
30 bytes of hash table, measured at 9M keys), 0.6 GB at 10M rows; this open-addressing table of uint64 slots (linear probing, 35% to 70% full)
costs 11 to 23 bytes a key. Hand-written because neither numpy nor the standard library has a set of machine
integers; the keys are hashes already, so a key's low bits are its slot.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

MAX_LOAD = 0.7
EMPTY = 0  # an empty slot; the key 0 itself is kept in a flag


class KeySet:
    """A set of unsigned 64-bit keys: `key in s`, `s.add(key)`, `s.update(keys)`, `len(s)`."""

    def __init__(self, capacity: int = 1 << 16):
        self._slots = np.zeros(1 << max(4, (capacity - 1).bit_length()), dtype=np.uint64)
        self._size = 0  # keys in slots
        self._zero = False

    def __len__(self) -> int:
        return self._size + self._zero

    def __contains__(self, key: int) -> bool:
        if key == EMPTY:
            return self._zero
        slots, mask = self._slots, len(self._slots) - 1
        index = key & mask
        while (found := int(slots[index])) != EMPTY:
            if found == key:
                return True
            index = (index + 1) & mask
        return False

    def add(self, key: int) -> None:
        if key == EMPTY:
            self._zero = True
            return
        slots, mask = self._slots, len(self._slots) - 1
        index = key & mask
        while (found := int(slots[index])) != EMPTY:
            if found == key:
                return
            index = (index + 1) & mask
        slots[index] = key
        self._size += 1
        if self._size > MAX_LOAD * len(slots):
            self._resize(2 * len(slots))

    def update(self, keys: Iterable[int] | np.ndarray) -> None:
        """Add many keys at once (an array of a staged source's keys: vectorised)."""
        array = np.unique(np.asarray(keys if isinstance(keys, np.ndarray) else list(keys), dtype=np.uint64))
        if array.size and array[0] == EMPTY:
            self._zero, array = True, array[1:]
        array = array[~self._contains_all(array)]
        needed = len(self._slots)
        while self._size + len(array) > MAX_LOAD * needed:
            needed *= 2
        if needed != len(self._slots):
            self._resize(needed)
        self._place(array)

    def _contains_all(self, keys: np.ndarray) -> np.ndarray:
        """Whether each key is in the table, probing every key's run of slots at once."""
        mask = np.uint64(len(self._slots) - 1)
        found = np.zeros(len(keys), dtype=bool)
        pending, index = np.arange(len(keys)), keys & mask
        while pending.size:
            slot = self._slots[index]
            found[pending[slot == keys[pending]]] = True
            going_on = (slot != EMPTY) & (slot != keys[pending])
            pending, index = pending[going_on], (index[going_on] + np.uint64(1)) & mask
        return found

    def _place(self, keys: np.ndarray) -> None:
        """Put distinct keys that are not in the table into empty slots, all at once: each round every key
        takes its slot where it is empty and no earlier key of the round claims it, the others move on."""
        mask = np.uint64(len(self._slots) - 1)
        pending, index = keys, keys & mask
        while pending.size:
            empty = self._slots[index] == EMPTY
            claimed, first = np.unique(index[empty], return_index=True)
            self._slots[claimed] = pending[empty][first]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(empty)[first]] = True
            pending, index = pending[~placed], (index[~placed] + np.uint64(1)) & mask
        self._size += len(keys)

    def _resize(self, capacity: int) -> None:
        keys = self._slots[self._slots != EMPTY]
        self._slots = np.zeros(capacity, dtype=np.uint64)
        self._size = 0
        self._place(keys)
