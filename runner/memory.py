"""Memory readings for progress records and `result.json`, cheap enough to take often.

Measured costs (2-core CPU VM): `os.pread` on a kept-open `/proc/self/statm` ~1.4 µs, `getrusage`
~0.8 µs; on CUDA one `torch.cuda.memory_stats()` call (each of the four convenience getters
would call it again) and no device synchronisation.
"""

import os
import resource
import sys
from typing import NamedTuple

from ._locks import still_ours

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# ru_maxrss is KiB on Linux and bytes on macOS.
_MAXRSS_SCALE = 1 if sys.platform == "darwin" else 1024


class CudaMemory(NamedTuple):
    """One `memory_stats()` snapshot, bytes."""

    allocated: int
    """`allocated_bytes.all.current`."""
    reserved: int
    """`reserved_bytes.all.current`."""
    peak_allocated: int
    """`allocated_bytes.all.peak`."""
    peak_reserved: int
    """`reserved_bytes.all.peak`."""


class MemoryProbe:
    """Reads RSS through a kept-open `/proc/self/statm` and CUDA counters when CUDA is initialised."""

    def __init__(self, cuda_device: str | None = None) -> None:
        """`cuda_device` (e.g. `cuda:1`) is the device whose counters are read; `None` means torch's current one."""
        self._cuda_device = cuda_device
        try:
            self._statm: int | None = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
            self._opened = os.fstat(self._statm)
        except OSError:  # not Linux: no current RSS, the peak still works
            self._statm = None
        self._max_seen = 0

    def rss_bytes(self) -> int | None:
        """Current resident set size (field 2 of statm x page size), `None` where unavailable."""
        if self._statm is None:
            return None
        try:
            rss = int(os.pread(self._statm, 128, 0).split()[1]) * _PAGE_BYTES
        except (OSError, ValueError, IndexError):  # user code closed the descriptor (or its number is another file now)
            return None
        self._max_seen = max(self._max_seen, rss)
        return rss

    def peak_rss_bytes(self) -> int:
        """Peak resident set size so far: `ru_maxrss`, or a higher reading this probe saw.

        The kernel folds per-thread RSS counters into `ru_maxrss` lazily, so it can trail a
        current `statm` reading by a few hundred KiB.
        """
        if self._statm is not None:
            self.rss_bytes()
        return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_SCALE, self._max_seen)

    def cuda(self) -> CudaMemory | None:
        """One `torch.cuda.memory_stats()` call, or `None` when torch is not loaded or CUDA not initialised.

        Never initialises CUDA itself: a CPU run must not pay for (or fail on) a CUDA context.
        """
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return None
        stats = torch.cuda.memory_stats(self._cuda_device)
        return CudaMemory(
            allocated=int(stats.get("allocated_bytes.all.current", 0)),
            reserved=int(stats.get("reserved_bytes.all.current", 0)),
            peak_allocated=int(stats.get("allocated_bytes.all.peak", 0)),
            peak_reserved=int(stats.get("reserved_bytes.all.peak", 0)),
        )

    def close(self) -> None:
        """Close the statm descriptor (idempotent)."""
        if self._statm is not None:
            if still_ours(self._statm, self._opened):
                os.close(self._statm)
            self._statm = None
