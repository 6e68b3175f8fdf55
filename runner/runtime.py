"""A backend's runtime: what the core asks of the library a backend computes with, with neutral answers.

The core (plan, execute, the environment record, a sweep's workers) never imports torch. Where a fact
depends on the numerical library a backend uses — which devices exist, what `auto` means, the
deterministic switches and thread counts recorded in `determinism.json`, the device's free memory, the
CUDA devices and package versions in `environment.json` — it asks the backend's optional `runtime`
attribute (`runtime_of`). A backend without one gets `Runtime()`: the answers that need no library
(CPU only for `auto`, no switches to set, `/proc/meminfo`), so a backend that brings its own engine
(the loop, a third party's plugin) runs and records itself without torch. The built-in torch backends
give a `TorchRuntime` (`genrun.backends`).

A backend overrides what it knows by subclassing `Runtime` (or passing `packages=`): each member is
independent, and the neutral one is what `determinism.json` and `environment.json` say when nothing more
is known (`None`: not recorded, never a guess).
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from genrun.schemas import CudaInfo, Determinism, Request


class DeviceMemory(NamedTuple):
    """Free and total memory of one device, bytes (`None` where the runtime cannot tell)."""

    device: str
    free_bytes: int | None
    total_bytes: int | None


class Runtime:
    """Neutral answers for a backend that names no numerical library; subclass and override what yours knows."""

    def __init__(self, packages: tuple[str, ...] = ()) -> None:
        self.packages = packages
        """Distributions whose versions shape this backend's generation: recorded in `environment.json` and listed by
        `report` (genrun's own are added by the core)."""

    def require_device(self, device: str) -> None:
        """Refuse at plan time (raise `RequestError`) a `[model] device` that cannot be used here. Neutral: anything goes —
        the backend's engine is handed the name and decides."""

    def resolve_device(self, device: str) -> str:
        """The device the run is placed on: `auto` -> a concrete one. Neutral: `auto` is `cpu`, any other name is kept."""
        return "cpu" if device == "auto" else device

    def device_memory(self, device: str) -> DeviceMemory:
        """Free and total memory of `device` (resolved). Neutral: MemAvailable / MemTotal for `cpu`, unknown otherwise."""
        if device != "cpu":
            return DeviceMemory(device, None, None)
        info = meminfo()
        return DeviceMemory("cpu", info.get("MemAvailable"), info.get("MemTotal"))

    @contextlib.contextmanager
    def deterministic_mode(self, request: Request, device: str) -> Iterator[Determinism]:
        """Apply `[determinism] strict` for the run and yield the settings as they are inside it (`sampling` is filled
        later, from the effective config). Neutral: there are no switches to set; only the request's seed and wish, and the
        device, are recorded, every library setting `None` (not known), never a value of a library the run did not use."""
        yield self.capture_determinism(request, device, strict=bool(request.determinism and request.determinism.strict))

    def capture_determinism(self, request: Request, device: str, strict: bool) -> Determinism:
        """The settings now (also when the run failed before `deterministic_mode` was entered)."""
        return Determinism(seed=request.seed, strict_requested=strict, deterministic_algorithms=None, deterministic_warn_only=None,
                           sampling=None, device=device, torch_threads=None, torch_interop_threads=None, cudnn_deterministic=None,
                           cudnn_benchmark=None, cuda_matmul_allow_tf32=None, cublas_workspace_config=None)

    def set_threads(self, threads: int) -> None:
        """Use `threads` compute threads in this process (a sweep worker's share of the cores). Neutral: nothing to set."""

    def cuda_info(self) -> CudaInfo | None:
        """CUDA devices as this runtime sees them, for `environment.json`. Neutral: `None` (not recorded)."""
        return None


NEUTRAL_RUNTIME = Runtime()
"""What a backend without a `runtime` attribute gets."""


def runtime_of(backend: Any) -> Runtime:
    """The backend's `runtime`, or the neutral one."""
    runtime = getattr(backend, "runtime", None)
    return runtime if runtime is not None else NEUTRAL_RUNTIME


def meminfo() -> dict[str, int]:
    """`/proc/meminfo` in bytes (empty where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024  # kB -> bytes
    return values


_thread_share: list[int] = []


def share_threads(threads: int | None) -> None:
    """A sweep worker's share of the cores, applied through the backend's runtime by each run in this process."""
    _thread_share[:] = [threads] if threads is not None else []


def apply_thread_share(runtime: Runtime) -> None:
    """Give `runtime` this process' share of the cores, when a sweep worker set one."""
    if _thread_share:
        runtime.set_threads(_thread_share[0])
