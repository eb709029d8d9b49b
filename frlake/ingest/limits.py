"""How much one dump may cost: file size, memory, expansion, CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

# Peak memory of decoding and parsing a real dump is 15-23 times its size
# (measured on 0.2-100 MB pickles); file-size caps derived from a memory
# budget divide it by this, with room to spare.
EXPANSION_FACTOR = 32
_GIB = 1 << 30


def machine_memory() -> int:
    """Physical memory of this machine in bytes (8 GiB if it cannot be told)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * _GIB


@dataclass(frozen=True)
class Limits:
    """Caps on what one dump may expand to. The defaults fit any real buffer
    (TORCH_FR_BUFFER_SIZE up to millions) with room to spare.

    ``memory_bytes`` is what one worker may allocate while it reads one dump
    (None: three quarters of the machine's memory shared by the workers,
    between 256 MiB and 16 GiB; see ``resolved``); ``max_file_bytes`` is
    derived from it (None: ``memory_bytes / EXPANSION_FACTOR``, at most
    2 GiB), so that no file under the cap can need more than the budget."""

    max_file_bytes: int | None = None
    memory_bytes: int | None = None
    max_entries: int = 5_000_000
    max_depth: int = 64
    max_string: int = 1 << 16
    max_tensors_per_entry: int = 1 << 16
    max_dims: int = 64
    max_frames: int = 1 << 12
    # Elements (tensors, dims, frames, unknown-field nodes) allowed per byte of
    # file; real dumps use under 0.1 (the corpus: 0.084 at most).
    expansion_per_byte: int = 2
    expansion_floor: int = 1 << 20
    # The fewest bytes a distinct entry, and one field of one entry, can take
    # in an honest file; the corpus' smallest are 209 and 10. More entries or
    # fields than this allows can only be shared references (a memo bomb).
    min_entry_bytes: int = 16
    min_field_bytes: int = 2
    # CPU seconds a worker process may spend decoding and parsing one dump (a
    # 2,000-entry dump needs about 0.02 s) before the kernel stops it.
    cpu_seconds: float = 30.0
    cpu_seconds_per_gib: float = 120.0

    def cpu_budget(self, size: int) -> float:
        return self.cpu_seconds + self.cpu_seconds_per_gib * size / (1 << 30)

    def resolved(self, workers: int = 1) -> Limits:
        """These limits with the memory budget and the file-size cap made
        concrete for this machine and ``workers`` parallel workers."""
        memory = self.memory_bytes
        if memory is None:
            memory = min(16 * _GIB, max(256 << 20, machine_memory() * 3 // 4 // max(1, workers)))
        max_file = self.max_file_bytes
        if max_file is None:
            max_file = min(2 * _GIB, memory // EXPANSION_FACTOR)
        return replace(self, memory_bytes=memory, max_file_bytes=max_file)
