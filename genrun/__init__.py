"""genrun: run generative models so that every run leaves an immutable, verifiable snapshot.

The library API mirrors the command line::

    import genrun

    snapshot = genrun.plan("examples/tiny.toml", store="snapshots")   # freeze (nothing runs)
    result = genrun.execute(snapshot)                                 # run, record, seal
    print(result.status, result.exit_code)
    print(genrun.verify(snapshot).summary)                            # typed findings

`genrun.run(...)` is plan + execute; `genrun.open_snapshot(path)` returns the typed artifacts.
Failures raise `genrun.GenrunError` subclasses carrying the CLI's exit code (`RequestError` 2,
`BudgetRefused` 3, ...). Like the CLI, library calls never download: the Hugging Face hub is put
in offline mode unless the caller set `HF_HUB_OFFLINE` themselves.

Heavy imports (torch, transformers) happen inside `plan`/`execute`/`run`; `open_snapshot` and
`verify` import neither, so they work where torch is not installed.
"""

from __future__ import annotations

from genrun import _started  # noqa: F401 - first: when genrun began to run (the startup phase is timed from it)

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from genrun.runner import __version__
from genrun.runner.errors import BudgetRefused, GenrunError, RequestError

if TYPE_CHECKING:
    from genrun import schemas as schemas
    from genrun.analysis import Snapshot, Verification
    from genrun.runner.sweep.driver import SweepRun
    from genrun.schemas import Request, Result

__all__ = [
    "BudgetRefused", "GenrunError", "RequestError", "__version__",
    "execute", "open_snapshot", "plan", "run", "schemas", "sweep", "verify",
]

_LAZY_SUBMODULES = ("schemas",)
"""Reachable as attributes after a plain `import genrun` (`genrun.schemas.Request`), imported on first use:
the models cost about half a second to import, which `genrun ls` and friends should not pay."""


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def offline_hub() -> None:
    """genrun never downloads: a stray hub call must fail at once instead of hanging on a closed network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def plan(request: str | os.PathLike[str] | Request, store: str | os.PathLike[str] | None = None, *, force: bool = False) -> Path:
    """Validate and freeze a request into a new planned snapshot; return its directory.

    `request` is a request file (`.toml` / `.json`) or a `genrun.schemas.Request` (relative
    model paths then resolve against the current directory). `store` defaults to
    `$GENRUN_STORE` or `./snapshots`. Raises `RequestError` (nothing written) or
    `BudgetRefused` (the pre-flight does not fit and `force` is false; nothing written).
    """
    offline_hub()
    from genrun.runner.plan import plan_request
    from genrun.schemas import Request

    return plan_request(request if isinstance(request, Request) else Path(request), store=_optional_path(store), force=force)


def execute(snapshot: str | os.PathLike[str], *, require_approval: bool = False, live: bool = False,
            allowed_signers: str | os.PathLike[str] | None = None) -> Result:
    """Run a planned snapshot with full instrumentation and seal it; return its `result.json`.

    A failure of the model or of user code is recorded (`result.status == "failed"`,
    `exit_code == 1`), not raised; refusals before anything runs raise `GenrunError`.
    `live=True` draws the progress bar on stderr.
    """
    offline_hub()
    from genrun.runner.execute import execute_snapshot

    signers = Path(allowed_signers) if allowed_signers is not None else None
    return execute_snapshot(Path(snapshot), require_approval=require_approval, live=live, allowed_signers=signers)


def run(request: str | os.PathLike[str] | Request, store: str | os.PathLike[str] | None = None, *, force: bool = False,
        require_approval: bool = False, live: bool = False,
        allowed_signers: str | os.PathLike[str] | None = None) -> tuple[Path, Result]:
    """`plan` then `execute`; returns the snapshot directory and its result."""
    snapshot = plan(request, store, force=force)
    return snapshot, execute(snapshot, require_approval=require_approval, live=live, allowed_signers=allowed_signers)


def sweep(sweep_file: str | os.PathLike[str], store: str | os.PathLike[str] | None = None, *, force: bool = False) -> SweepRun:
    """`genrun sweep SWEEP.toml`: validate and plan every item (nothing written on a refusal), run them, seal the sweep.

    Returns the sweep directory, its `sweep-result.json` and the CLI's exit code. Resume a sweep
    whose driver died with `genrun.runner.sweep.driver.execute_sweep(sweep_dir, make_pool)`.
    """
    offline_hub()
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool
    from genrun.runner.sweep.store import plan_sweep

    return execute_sweep(plan_sweep(Path(sweep_file), _optional_path(store), force=force), make_pool)


def open_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Read a snapshot's artifacts, read-only, as typed models (`.request`, `.result`, `.stop`, ...).

    Older snapshot formats are migrated in memory; nothing on disk changes.
    """
    from genrun.analysis import read_snapshot

    return read_snapshot(Path(path))


def verify(path: str | os.PathLike[str], *, allowed_signers: str | os.PathLike[str] | None = None) -> Verification:
    """Run every analysis check on a snapshot; returns typed findings (`.findings`, `.summary`, `.exit_code(strict)`)."""
    from genrun.analysis import verify_snapshot

    return verify_snapshot(Path(path), allowed_signers=Path(allowed_signers) if allowed_signers else None)


def _optional_path(path: str | os.PathLike[str] | None) -> Path | None:
    """`path` as a `Path` (the internal functions take `str | Path`), `None` kept."""
    return Path(path) if path is not None else None
