"""`genrun execute`: run a planned snapshot with full instrumentation, then seal it.

Order:
1. before anything is loaded, verify the frozen plan (`frozen_plan`: not executed yet, frozen files,
   code and model unchanged);
2. with `--require-approval` or `[policy] require_approval`, require an `approve` sign-off;
3. hold SIGINT/SIGTERM (`genrun.runner.interrupts`) from opening `progress.ndjson` to the seal; run the
   backend through the run template (`run_template`: load, generate, finish);
4. write the terminal progress event, `determinism.json`, `generation-stop.json`, `result.json` (`run_result`);
   throughout, what libraries print goes to `run-log.ndjson`, not the terminal (`run_log`);
5. seal the snapshot (the manifest, written last) — also after a model failure or a signal; only a failed
   write of the evidence itself (a full disk) leaves it unsealed, which every reader shows as incomplete.
"""

import contextlib
import errno
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from pydantic import BaseModel

from genrun.schemas import Determinism, GenerationStop, Result, TokenBudget, layout
from genrun.schemas.progress import Unit
from genrun.snapshot_dir import SnapshotDir

from ._io import release_space, reserve_space
from ._locks import held_exclusively
from .backends import Backend, ExecutionContext, LoadedModel, get_backend
from .budget import resolve_device
from .determinism import capture_determinism, deterministic_mode, with_sampling
from .errors import FrozenMismatch, SnapshotError, StoreError
from .executing_process import executing
from .frozen_plan import (FrozenPlan, VerifiedIdentity, load_context, load_frozen, refuse_executed, verify_before_loading, verify_code,
                          verify_model, verify_plan_files)
from .interrupts import RunInterrupted, deferred, interrupt_gate
from .live_progress import LiveProgress, wants_live
from .memory import MemoryProbe
from .outputs_dir import OutputsDir
from .phases import PhaseClock
from .recorder import ProgressRecorder
from .run_log import RunLog, captured
from .run_result import build_result, write_terminal_event
from .run_template import RunRecord, interrupted_before_running, run_template
from .store import describe_os_error, open_snapshot, seal_snapshot

SEALING_RESERVE_FIXED = 1 << 20
"""Bytes held for the JSON artifacts, the manifest and one filesystem block per file."""
SEALING_RESERVE_MAX = 1 << 30
"""Never hold more than this (a budget of 30M ids)."""
FSYNC_EVERY_S = 5.0
"""Seconds between fsyncs of `progress.ndjson` (and one at the end)."""


def execute_snapshot(
    snapshot_dir: Path, *, require_approval: bool = False, live: bool | None = None, loaded: LoadedModel | None = None,
    allowed_signers: Path | None = None, records: Mapping[str, BaseModel] | None = None,
) -> Result:
    """Run a planned snapshot and seal it; returns `result.json`'s content.

    `loaded`: a model already loaded by this snapshot's backend (`backend.load(ctx)`, e.g. by a
    worker running many snapshots of one model) for the same frozen model identity: backend,
    `model.json` digest, dtype, loader and resolved device must equal this plan's, else a
    `SnapshotError` is raised before anything is written. The run then skips loading; `load_s`
    is the earlier load's duration and `result.json` notes the reuse. `None` (the default) loads
    inside the run, so a failed load is recorded as a failed, sealed snapshot. `records` (a
    `genrun.schemas.layout` name -> model) are written into the snapshot during the run and sealed
    with it, e.g. a sweep worker's `worker-model.json`.

    Refusals (already executed, frozen files or code changed, approval missing) raise a
    `GenrunError` before anything is written. Once execution starts, failures of the model or of
    user code and SIGINT/SIGTERM are recorded, not raised: the result says `failed` (exit 1) or
    `interrupted` (exit 130/143). `live=None` shows the progress bar only when stderr is a TTY.
    `allowed_signers` checks approve signatures (None: `$GENRUN_ALLOWED_SIGNERS`, then git's file).
    """
    clock = PhaseClock(time.monotonic())
    with captured() as log:  # library output from here on goes to the snapshot's run-log.ndjson (`run_log`)
        snapshot_dir = open_snapshot(snapshot_dir)
        with execution_lock(snapshot_dir), executing(snapshot_dir):
            return _execute_locked(snapshot_dir, clock, log, require_approval, live, loaded, allowed_signers, records or {})


@contextlib.contextmanager
def execution_lock(snapshot_dir: Path) -> Iterator[None]:
    """An exclusive `flock` on `frozen-sha256.txt` for the whole execution: a second `execute` of the same plan is
    refused naming the holder's PID (the kernel drops the lock when the holder dies, SIGKILL included)."""
    with held_exclusively(
        snapshot_dir / layout.FROZEN_MANIFEST, extra_flags=0,
        unopenable=lambda why: FrozenMismatch(f"{snapshot_dir / layout.FROZEN_MANIFEST} cannot be opened as a regular file ({why}); "
                                              "plan the request again"),
        busy=lambda holder: SnapshotError(f"snapshot {snapshot_dir} is already being executed by {holder}; a snapshot runs once: "
                                          "wait for it, or plan a new one with 'genrun plan REQUEST'")):
        yield


def _execute_locked(
    snapshot_dir: Path, clock: PhaseClock, log: RunLog, require_approval: bool, live: bool | None, loaded: LoadedModel | None,
    allowed_signers: Path | None, records: Mapping[str, BaseModel],
) -> Result:
    plan, identity = verify_before_loading(snapshot_dir)
    approval_note = None
    policy = plan.request.policy.require_approval
    if require_approval or policy:
        from .signoff import check_approval, describe_approval

        approval_note = describe_approval(check_approval(snapshot_dir, allowed_signers, allow_unsigned=policy == "any"))
    clock.enter("imports")
    backend = get_backend(plan.request.model.backend)
    clock.enter("prepare")
    device = resolve_device(plan.request.model.device)
    if loaded is not None and (why := loaded.mismatch(backend.name, plan.model, plan.request, device)) is not None:
        raise SnapshotError(f"the loaded model cannot run snapshot {snapshot_dir}: {why}; execute it without a preloaded model")
    unit = backend.progress_unit(plan.request)
    bar = LiveProgress(unit[0], plan.budget.requested_units) if wants_live(live) else None
    memory = MemoryProbe(device if device.startswith("cuda") else None)
    # One gate from the first execution file to the seal: a signal anywhere in between ends as a sealed
    # `interrupted` snapshot (nested in the CLI's gate, it shares its handlers).
    with interrupt_gate():
        try:
            hold_sealing_space(snapshot_dir, plan.budget)
            recorder, outputs = open_recorder_or_keep_plan(snapshot_dir, plan, unit, clock.origin, bar, memory)
            return _run_record_seal(snapshot_dir, plan, identity, backend, device, recorder, outputs, bar, loaded, clock, log,
                                    approval_note=approval_note, records=records)
        finally:
            release_space(snapshot_dir)


def sealing_reserve_bytes(budget: TokenBudget) -> int:
    """Room for every id (safetensors, summary, text: ~4 copies of 8 bytes), the JSON artifacts and the manifest,
    plus a block per file; bytes."""
    ids = (budget.requested_units or 0) * max(budget.rows_per_request, 1)
    return min(SEALING_RESERVE_FIXED + 32 * ids, SEALING_RESERVE_MAX)


def hold_sealing_space(snapshot_dir: Path, budget: TokenBudget) -> None:
    """Reserve what sealing needs before anything runs; a store without that room refuses the run, plan intact."""
    try:
        with deferred():  # a signal waits until the reserve is registered, so it is always released
            reserve_space(snapshot_dir, sealing_reserve_bytes(budget))
    except OSError as exc:
        raise StoreError(f"{describe_os_error(exc, snapshot_dir)}; nothing was run and the plan is intact") from exc


def open_recorder_or_keep_plan(
    snapshot_dir: Path, plan: "FrozenPlan", unit: tuple[Unit, int], origin: float, bar: LiveProgress | None, memory: MemoryProbe
) -> tuple[ProgressRecorder, OutputsDir]:
    """Open `progress.ndjson`, the first execution file, and make and hold `outputs/`; a signal while doing so removes
    both again, so the plan stays intact and executable (the signal is held until both exist, so they are ours to
    remove), and a signal can never land between them, where no backend step could record the run's empty evidence."""
    recorder: ProgressRecorder | None = None
    outputs: OutputsDir | None = None
    try:
        with deferred():
            recorder = open_recorder(snapshot_dir, plan, unit, origin, bar, memory)
            outputs = OutputsDir(snapshot_dir)
    except RunInterrupted:
        if recorder is not None:
            recorder.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot_dir / layout.PROGRESS)
        if outputs is not None:
            outputs.close()
            with contextlib.suppress(OSError):
                os.rmdir(snapshot_dir / layout.OUTPUTS_DIR)
        raise
    assert recorder is not None and outputs is not None, "both are made in the block above or it raised"
    return recorder, outputs


def _run_record_seal(
    snapshot_dir: Path, plan: FrozenPlan, identity: VerifiedIdentity, backend: Backend, device: str,
    recorder: ProgressRecorder, outputs: OutputsDir, bar: LiveProgress | None, loaded: LoadedModel | None, clock: PhaseClock,
    log: RunLog, *, approval_note: str | None, records: Mapping[str, BaseModel],
) -> Result:
    """Run the template, write the terminal event, determinism, stop and result, then seal.

    The seal is written only after `result.json`: a failed write (a full disk) leaves the snapshot recognisably
    unsealed (`incomplete`/`running`) and raises a `StoreError` naming the store and its free space.
    """
    determinism: Determinism | None = None
    result_written = False
    snapshot = SnapshotDir(snapshot_dir, writable=True)
    try:
        try:
            log.open(snapshot_dir, clock.origin)  # execution files exist now: what was held (imports, checks) is written too
            ctx = ExecutionContext(
                **vars(load_context(plan, device, snapshot_dir)),
                snapshot_dir=snapshot_dir,
                recorder=recorder,
                planned_units=plan.budget.requested_units,
                outputs=outputs,
            )
            with bar if bar is not None else contextlib.nullcontext():  # the bar shows the terminal event's count too
                with deterministic_mode(plan.request, device) as determinism:
                    run = run_template(backend, ctx, loaded, clock)
                _write_terminal_event_on_a_full_disk(snapshot_dir, recorder, run)
        except RunInterrupted as exc:  # after the stream opened, before the template's gate took over
            run = interrupted_before_running(recorder, exc.signal_name)
            clock.enter("evidence")
            _write_terminal_event_on_a_full_disk(snapshot_dir, recorder, run)
        if determinism is None:
            determinism = capture_determinism(plan.request, device, strict=False)
        snapshot.write(layout.DETERMINISM, with_sampling(determinism, snapshot_dir))
        for name, record in records.items():
            snapshot.write(name, record)
        snapshot.write(layout.STOP, GenerationStop(sequences=run.outcome.stops))
        log.close()  # complete before result.json, which is written after every other execution file
        result = build_result(plan, identity, run, recorder.memory, clock.stop(), per_row=recorder.generated)
        extra_notes = tuple(note for note in (approval_note, log.failure) if note is not None)
        if extra_notes:
            result = result.model_copy(update={"notes": (*extra_notes, *result.notes)})
        snapshot.write(layout.RESULT, result)
        result_written = True
        recorder.close()
        release_space(snapshot_dir)  # the reserve is not evidence: gone before the manifest lists the files
        seal_snapshot(snapshot_dir)
    except OSError as exc:
        raise StoreError(describe_os_error(exc, snapshot_dir) + ("" if result_written else "; the snapshot is left unsealed (incomplete)")) from exc
    finally:
        recorder.close()
        outputs.close()
    return result


def load_for_snapshot(snapshot_dir: Path) -> LoadedModel:
    """Load the model of a planned snapshot through its backend, for `execute_snapshot(..., loaded=)`.

    The frozen plan and model files are verified first, as `execute` does; a failed load raises
    (nothing is recorded: no snapshot is being executed). Any other planned snapshot of the same
    frozen model, dtype, loader and device can reuse the result.
    """
    snapshot_dir = open_snapshot(snapshot_dir)
    plan, _ = verify_before_loading(snapshot_dir)
    return get_backend(plan.request.model.backend).load(load_context(plan, resolve_device(plan.request.model.device), snapshot_dir))


def open_recorder(
    snapshot_dir: Path, plan: FrozenPlan, unit: tuple[Unit, int], origin: float, bar: LiveProgress | None, memory: MemoryProbe
) -> ProgressRecorder:
    """`progress.ndjson` at the request's cadence, counting the backend's `(unit, steps per unit)`;
    an unwritable store is a StoreError (nothing written yet)."""
    unit_name, per_unit = unit
    try:
        return ProgressRecorder(
            snapshot_dir / layout.PROGRESS,
            origin=origin,
            unit=unit_name,
            tokens_per_unit=per_unit,
            every_units=plan.request.progress.every_units,
            every_seconds=plan.request.progress.every_seconds,
            fsync_every_s=FSYNC_EVERY_S,
            memory=memory,
            live=bar,
        )
    except OSError as exc:
        raise StoreError(describe_os_error(exc, snapshot_dir)) from exc


def _write_terminal_event_on_a_full_disk(snapshot_dir: Path, recorder: ProgressRecorder, run: RunRecord) -> None:
    """The terminal event; on a full disk (the disk filled while generating), with the sealing reserve given back."""
    try:
        write_terminal_event(recorder, run)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not release_space(snapshot_dir):
            raise
        write_terminal_event(recorder, run)


# `load_frozen` and `FrozenPlan` are read by rerun and the sweep's model cache; the verification functions are public.
__all__ = ["FrozenPlan", "execute_snapshot", "load_for_snapshot", "load_frozen", "refuse_executed", "verify_code", "verify_model",
           "verify_plan_files"]
