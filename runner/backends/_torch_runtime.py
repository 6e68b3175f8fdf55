"""torch's answers to the core's runtime questions (`genrun.runner.runtime.Runtime`), for the backends that compute with it.

The transformers, diffusers and vLLM backends name `TorchRuntime` as their `runtime`; the core asks it, and only it
imports torch: which devices exist and what `auto` means, the deterministic switches (process-global, so set for the
run and restored afterwards: an in-process caller, tests or the library API, gets its settings back), the thread
counts, CUDA's free memory, and the CUDA devices `environment.json` records.
"""

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from genrun.schemas import CudaDevice, CudaInfo, Determinism, Request

from ..errors import RequestError
from ..runtime import DeviceMemory, Runtime

CUBLAS_WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
"""cuBLAS refuses deterministic algorithms without a fixed workspace (CUDA >= 10.2); NVIDIA's documented value."""

_NVIDIA_SMI_TIMEOUT_S = 10.0

TORCH_PACKAGES = ("torch", "tokenizers", "safetensors", "numpy", "huggingface_hub", "accelerate")
"""Distributions every torch backend's generation depends on (each backend adds its own library)."""


class TorchRuntime(Runtime):
    """Devices, determinism, threads, memory and CUDA as torch sees them (torch imported on first use, never at import)."""

    def require_device(self, device: str) -> None:
        """RequestError (exit 2) naming the device, what is available, and the fix, when `device` cannot be used here."""
        if device in ("auto", "cpu"):
            return
        import torch

        wanted = "cuda:0" if device == "cuda" else device
        available = available_devices()
        if wanted in available:
            return
        if len(available) == 1:
            why = (f"this torch ({torch.__version__}) was built without CUDA" if torch.version.cuda is None
                   else f"this torch ({torch.__version__}, CUDA {torch.version.cuda}) finds no CUDA device")
        else:
            why = f"this machine has {len(available) - 1} CUDA device(s)"
        raise RequestError(
            f"[model] device = {device!r} is not available: {why}; available: {', '.join(available)}. "
            f'Set device = "auto" (or one of the available devices), or run where {wanted} exists'
        )

    def resolve_device(self, device: str) -> str:
        """`auto` -> `cuda:0` when CUDA is available, else `cpu`; `cuda` -> `cuda:0`."""
        if device == "auto":
            import torch

            return "cuda:0" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise RequestError(f"[model] device = {device!r}, but this torch has no usable CUDA device "
                                   f"(torch {torch.__version__}); use device = 'cpu' or 'auto'")
        if device == "cuda":
            return "cuda:0"
        return device

    def device_memory(self, device: str) -> DeviceMemory:
        """`cudaMemGetInfo` for CUDA, MemAvailable for CPU."""
        if device.startswith("cuda"):
            import torch

            free, total = torch.cuda.mem_get_info(torch.device(device))
            return DeviceMemory(device, free, total)
        return super().device_memory(device)

    @contextlib.contextmanager
    def deterministic_mode(self, request: Request, device: str) -> Iterator[Determinism]:
        """`[determinism] strict`: `torch.use_deterministic_algorithms(True)` (and cuBLAS' workspace and cuDNN's switch on
        CUDA) for the run, restored afterwards."""
        import torch

        strict = bool(request.determinism and request.determinism.strict)
        cuda = device.startswith("cuda")
        saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
        saved_env = os.environ.get(CUBLAS_WORKSPACE_ENV)
        saved_cudnn = torch.backends.cudnn.deterministic
        try:
            if strict:
                if cuda and saved_env is None:
                    os.environ[CUBLAS_WORKSPACE_ENV] = CUBLAS_DETERMINISTIC_WORKSPACE
                torch.use_deterministic_algorithms(True)
                if cuda:
                    torch.backends.cudnn.deterministic = True
            yield self.capture_determinism(request, device, strict)
        finally:
            # Only a change is undone: `use_deterministic_algorithms` imports torch._inductor and torch._dynamo (seconds),
            # which a run that never loaded them would otherwise pay while writing its evidence.
            if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != saved:
                torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
            torch.backends.cudnn.deterministic = saved_cudnn
            if saved_env is None:
                os.environ.pop(CUBLAS_WORKSPACE_ENV, None)

    def capture_determinism(self, request: Request, device: str, strict: bool) -> Determinism:
        """The current process' settings; the CUDA-only ones are `None` on a CPU run."""
        import torch

        cuda = device.startswith("cuda")
        return Determinism(
            seed=request.seed,
            strict_requested=strict,
            deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            sampling=None,
            device=device,
            torch_threads=torch.get_num_threads(),
            torch_interop_threads=torch.get_num_interop_threads(),
            cudnn_deterministic=bool(torch.backends.cudnn.deterministic) if cuda else None,
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark) if cuda else None,
            cuda_matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None,
            cublas_workspace_config=os.environ.get(CUBLAS_WORKSPACE_ENV) if cuda else None,
        )

    def set_threads(self, threads: int) -> None:
        """`torch.set_num_threads`."""
        import torch

        torch.set_num_threads(threads)

    def cuda_info(self) -> CudaInfo | None:
        """CUDA as torch sees it; `None` when torch cannot be imported (a broken install is an environment fact, not a
        reason to fail the plan)."""
        try:
            import torch
        except Exception:
            return None
        available = bool(torch.cuda.is_available())
        devices = []
        if available:
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                devices.append(CudaDevice(index=index, name=props.name, capability=(props.major, props.minor),
                                          total_memory_bytes=props.total_memory))
        return CudaInfo(available=available, version=torch.version.cuda, driver=_cuda_driver(torch), devices=tuple(devices))


def available_devices() -> tuple[str, ...]:
    """`cpu`, then `cuda:0` … `cuda:N-1` as this torch sees them."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ("cpu", *(f"cuda:{i}" for i in range(count)))


def _cuda_driver(torch_module: Any) -> str | None:
    """Driver version: `torch.cuda.driver_version()` where torch has it, else `nvidia-smi`, else `None`."""
    getter = getattr(getattr(torch_module, "cuda", None), "driver_version", None)
    if callable(getter):
        try:
            return str(getter())
        except Exception:  # not built with CUDA / no driver: fall through to nvidia-smi
            pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first or None
