"""What bit-for-bit reproduction depends on: `[determinism] strict` applied for one run, and `determinism.json`.

torch's deterministic switches are process-global; `deterministic_mode` sets them for the run and
restores them afterwards, so an in-process caller (tests, the library API) gets its settings back.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from genrun.schemas import Determinism, GenerationConfigBeforeGenerate, Request, layout
from genrun.snapshot_dir import SnapshotDir

CUBLAS_WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
"""cuBLAS refuses deterministic algorithms without a fixed workspace (CUDA >= 10.2); NVIDIA's documented value."""


@contextlib.contextmanager
def deterministic_mode(request: Request, device: str) -> Iterator[Determinism]:
    """Apply `[determinism] strict` for the duration of the run; yields the settings as they are inside it.

    `sampling` is `None` in the yielded record: it is only known once generate has merged its config
    (see `with_sampling`).
    """
    import torch  # deferred: execution imports torch anyway, planning and analysis must not

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
        yield capture_determinism(request, device, strict)
    finally:
        # Only a change is undone: `use_deterministic_algorithms` imports torch._inductor and torch._dynamo (seconds),
        # which a run that never loaded them (a loop on another engine) would otherwise pay while writing its evidence.
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != saved:
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.deterministic = saved_cudnn
        if saved_env is None:
            os.environ.pop(CUBLAS_WORKSPACE_ENV, None)


def capture_determinism(request: Request, device: str, strict: bool) -> Determinism:
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


def with_sampling(record: Determinism, snapshot_dir: Path) -> Determinism:
    """Fill `sampling` from the effective config generate wrote (`do_sample`); `None` when there is none (diffusers, a failed load)."""
    config = SnapshotDir(snapshot_dir).read_optional(layout.GENERATION_CONFIG, GenerationConfigBeforeGenerate)
    if config is None:
        return record
    do_sample = config.effective.get("do_sample")
    return record.model_copy(update={"sampling": bool(do_sample) if do_sample is not None else None})
