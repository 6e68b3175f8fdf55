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

Before the first execution file, a refusal (a `GenrunError`: executed already, the plan or code changed, approval
missing, the backend not installed here, the device gone, no room to seal) writes nothing and leaves the plan
executable. Any other exception from then on — genrun's own steps (the backend's import, its runtime's device and
determinism, the run log, the evidence), the backend's or user code — is the run's failure: recorded in
`result.json` and sealed `failed`, never left `running`.
"""

import contextlib
import errno
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel

from genrun.schemas import Determinism, GenerationStop, Result, SequenceStop, TokenBudget, layout
from genrun.schemas.progress import Unit
from genrun.snapshot_dir import SnapshotDir

from ._io import release_space, reserve_space
from ._locks import held_exclusively
from .backends import Backend, ExecutionContext, LoadedModel, get_backend
from .determinism import with_sampling
from .errors import FrozenMismatch, GenrunError, SnapshotError, StoreError
from .executing_process import executing
from .frozen_plan import (FrozenPlan, VerifiedIdentity, load_context, load_frozen, refuse_executed, verify_before_loading, verify_code,
                          verify_model, verify_plan_files)
from .interrupts import RunInterrupted, deferred, interrupt_gate, stop_if_requested
from .live_progress import LiveProgress, wants_live
from .memory import MemoryProbe
from .outputs_dir import OutputsDir
from .phases import PhaseClock
from .recorder import ProgressRecorder
from .run_log import RunLog, captured
from .run_result import build_result, write_terminal_event
from .run_template import RunRecord, failed_run, interrupted_before_running, run_template
from .runtime import NEUTRAL_RUNTIME, Runtime, apply_thread_share, runtime_of
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
        # The run's one `SnapshotDir`, opened once: every check, file and the seal are relative to the directory it holds,
        # so a path renamed or replaced mid-run never receives a file of this run.
        with SnapshotDir(snapshot_dir, writable=True).held_open() as snapshot, execution_lock(snapshot_dir), executing(snapshot_dir):
            return _execute_locked(snapshot, clock, log, require_approval, live, loaded, allowed_signers, records or {})


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
    snapshot: SnapshotDir, clock: PhaseClock, log: RunLog, require_approval: bool, live: bool | None, loaded: LoadedModel | None,
    allowed_signers: Path | None, records: Mapping[str, BaseModel],
) -> Result:
    snapshot_dir = snapshot.path
    plan, identity = verify_before_loading(snapshot)
    approval_note = None
    policy = plan.request.policy.require_approval
    if require_approval or policy:
        from .signoff import check_approval, describe_approval

        approval_note = describe_approval(check_approval(snapshot_dir, allowed_signers, allow_unsigned=policy == "any"))
    early_failure: Exception | None = None
    try:
        clock.enter("imports")
        made = get_backend(plan.request.model.backend)
        runtime = runtime_of(made)
        clock.enter("prepare")
        apply_thread_share(runtime)
        device = runtime.resolve_device(plan.request.model.device)
        if loaded is not None and (why := loaded.mismatch(made.name, plan.model, plan.request, device)) is not None:
            raise SnapshotError(f"the loaded model cannot run snapshot {snapshot_dir}: {why}; execute it without a preloaded model")
        unit = made.progress_unit(plan.request)
        backend: Backend | None = made
    except GenrunError:
        raise  # a refusal: nothing written, the plan stays executable
    except Exception as exc:  # recorded as the run's failure once the stream is open (the module docstring)
        early_failure, backend, runtime = exc, None, NEUTRAL_RUNTIME
        device, unit = plan.request.model.device, (plan.budget.units, 1)
    bar = LiveProgress(unit[0], plan.budget.requested_units) if wants_live(live) else None
    memory = MemoryProbe(device if device.startswith("cuda") else None)
    # One gate from the first execution file to the seal: a signal anywhere in between ends as a sealed
    # `interrupted` snapshot (nested in the CLI's gate, it shares its handlers).
    with interrupt_gate():
        stop_if_requested()  # a signal swallowed before the gate (by a library's `except BaseException`) still stops the run
        try:
            hold_sealing_space(snapshot, plan.budget)
            recorder, outputs = open_recorder_or_keep_plan(snapshot, plan, unit, clock.origin, bar, memory)
            run = _Run(snapshot, plan, identity, runtime, device, recorder, outputs, clock, log)
            return _run_record_seal(run, backend, bar, loaded, early_failure, approval_note=approval_note, records=records)
        finally:
            release_space(snapshot_dir)


def sealing_reserve_bytes(budget: TokenBudget) -> int:
    """Room for every id (safetensors, summary, text: ~4 copies of 8 bytes), the JSON artifacts and the manifest,
    plus a block per file; bytes."""
    ids = (budget.requested_units or 0) * max(budget.rows_per_request, 1)
    return min(SEALING_RESERVE_FIXED + 32 * ids, SEALING_RESERVE_MAX)


def hold_sealing_space(snapshot: SnapshotDir, budget: TokenBudget) -> None:
    """Reserve what sealing needs before anything runs; a store without that room refuses the run, plan intact."""
    try:
        with deferred():  # a signal waits until the reserve is registered, so it is always released
            reserve_space(snapshot.path, sealing_reserve_bytes(budget), directory_fd=snapshot.fd)
    except OSError as exc:
        raise StoreError(f"{describe_os_error(exc, snapshot.path)}; nothing was run and the plan is intact") from exc


def open_recorder_or_keep_plan(
    snapshot: SnapshotDir, plan: "FrozenPlan", unit: tuple[Unit, int], origin: float, bar: LiveProgress | None, memory: MemoryProbe
) -> tuple[ProgressRecorder, OutputsDir]:
    """Open `progress.ndjson`, the first execution file, and make and hold `outputs/`; a signal while doing so removes
    both again, so the plan stays intact and executable (the signal is held until both exist, so they are ours to
    remove), and a signal can never land between them, where no backend step could record the run's empty evidence."""
    recorder: ProgressRecorder | None = None
    outputs: OutputsDir | None = None
    try:
        with deferred():
            recorder = open_recorder(snapshot, plan, unit, origin, bar, memory)
            outputs = OutputsDir(snapshot)
    except RunInterrupted:
        if recorder is not None:
            recorder.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(layout.PROGRESS, dir_fd=snapshot.fd)
        if outputs is not None:
            outputs.close()
            with contextlib.suppress(OSError):
                os.rmdir(layout.OUTPUTS_DIR, dir_fd=snapshot.fd)
        raise
    assert recorder is not None and outputs is not None, "both are made in the block above or it raised"
    return recorder, outputs


class _Run(NamedTuple):
    """One execution from its first file to the seal: what every step of recording and sealing it reads."""

    snapshot: SnapshotDir
    """The snapshot, writable: the one object every artifact of the run is written through."""
    plan: FrozenPlan
    identity: VerifiedIdentity
    runtime: Runtime
    """The backend's runtime (the neutral one when the backend could not even be made)."""
    device: str
    recorder: ProgressRecorder
    outputs: OutputsDir
    clock: PhaseClock
    log: RunLog


def _run_record_seal(
    run: _Run, backend: Backend | None, bar: LiveProgress | None, loaded: LoadedModel | None, early_failure: Exception | None, *,
    approval_note: str | None, records: Mapping[str, BaseModel],
) -> Result:
    """Run the template, then record the run and seal it; an exception of genrun's own steps is the run's failure.

    The seal is written only after `result.json`: a failed write (a full disk) leaves the snapshot recognisably
    unsealed (`incomplete`/`running`) and raises a `StoreError` naming the store and its free space.
    """
    record: RunRecord | None = None
    try:
        with bar if bar is not None else contextlib.nullcontext():  # the bar shows the terminal event's count too
            record, determinism = _generate(run, backend, loaded, early_failure)
            try:
                return _record_and_seal(run, record, determinism, approval_note, records)
            except OSError:
                raise
            except Exception as exc:  # the evidence could not be made as the run ended: the run failed with that
                kept = record.outcome if _valid_stops(record.outcome.stops) else None  # the backend's evidence, when it is sound
                return _record_and_seal(run, failed_run(run.recorder, exc, kept), determinism, approval_note, records,
                                        read_sampling=False)
    except OSError as exc:
        unsealed = "" if run.snapshot.has(layout.RESULT) else "; the snapshot is left unsealed (incomplete)"
        raise StoreError(describe_os_error(exc, run.snapshot.path) + unsealed) from exc
    finally:
        run.recorder.close()
        run.outputs.close()
        if record is not None:
            _release_after_seal(record.loaded_here)


def _release_after_seal(loaded: LoadedModel | None) -> None:
    """Free the model a run loaded itself (`LoadedModel.release`: vLLM stops its engine-core process) once the snapshot is
    sealed (or could not be): stopping an engine takes seconds that are neither generation nor evidence, and a kill
    during them finds the run already sealed. What the library prints meanwhile is dropped with the closed run log."""
    if loaded is None or loaded.release is None:
        return
    try:
        loaded.release()
    except Exception as exc:  # noqa: BLE001 - the sealed run stands; freeing its model is this process's business
        sys.stderr.write(f"genrun: warning: the {loaded.backend} model was not released cleanly after the run was sealed "
                         f"({type(exc).__name__}: {exc})\n")


def _valid_stops(stops: tuple[SequenceStop, ...]) -> bool:
    """Whether `generation-stop.json` accepts these stop records (a backend may hand ones its declared models refuse)."""
    try:
        GenerationStop(sequences=stops)
    except ValueError:  # pydantic's ValidationError
        return False
    return True


def _generate(run: _Run, backend: Backend | None, loaded: LoadedModel | None,
              early_failure: Exception | None) -> tuple[RunRecord, Determinism | None]:
    """Open the run log, enter the runtime's deterministic mode and run the template; what ended the run as a record (never
    raises for a failure: the template records the backend's and user code's, this genrun's own)."""
    determinism: Determinism | None = None
    try:
        run.log.open(run.snapshot, run.clock.origin)  # execution files exist now: what was held (imports, checks) is written too
        if early_failure is not None:
            raise early_failure
        assert backend is not None, "made above, or early_failure says why not"
        ctx = ExecutionContext(
            **vars(load_context(run.plan, run.device, run.snapshot.path)),
            snapshot=run.snapshot,
            recorder=run.recorder,
            planned_units=run.plan.budget.requested_units,
            outputs=run.outputs,
        )
        with run.runtime.deterministic_mode(run.plan.request, run.device) as determinism:
            return run_template(backend, ctx, loaded, run.clock), determinism
    except RunInterrupted as exc:  # after the stream opened, before the template's gate took over
        run.clock.enter("evidence")
        return interrupted_before_running(run.recorder, exc.signal_name), determinism
    except Exception as exc:  # genrun's own step failed (the backend's import, the runtime, the run log): the run's failure
        run.clock.enter("evidence")
        return failed_run(run.recorder, exc), determinism


def _record_and_seal(run: _Run, record: RunRecord, determinism: Determinism | None, approval_note: str | None,
                     records: Mapping[str, BaseModel], *, read_sampling: bool = True) -> Result:
    """The terminal event, then `determinism.json`, the caller's records, `generation-stop.json`, `result.json` and the seal.

    Everything that can fail without writing (the effective config `sampling` is read from, the stop records' model,
    `result.json`'s content) is made before the terminal event, so such a failure is recorded by a second call as the run's
    failure, with a terminal event that agrees (that call reads nothing: `read_sampling=False`). The terminal event comes
    before the files: it needs no new inode, so a store that cannot take them still shows the run ended."""
    snapshot = run.snapshot
    if determinism is None:  # the run ended before its runtime's deterministic mode: the neutral record after a failure
        runtime = run.runtime if record.exception is None else NEUTRAL_RUNTIME
        determinism = runtime.capture_determinism(run.plan.request, run.device, strict=False)
    if read_sampling:
        determinism = with_sampling(determinism, snapshot)
    stop = GenerationStop(sequences=record.outcome.stops)
    run.log.close()  # complete before the evidence files (nothing prints while they are written)
    result = build_result(run.plan, run.identity, record, run.recorder.memory, run.clock.stop(), per_row=run.recorder.generated)
    extra_notes = tuple(note for note in (approval_note, run.log.failure) if note is not None)
    if extra_notes:
        result = result.model_copy(update={"notes": (*extra_notes, *result.notes)})
    _write_terminal_event_on_a_full_disk(snapshot.path, run.recorder, record)
    snapshot.write(layout.DETERMINISM, determinism)
    for name, extra in records.items():
        snapshot.write(name, extra)
    snapshot.write(layout.STOP, stop)
    snapshot.write(layout.RESULT, result)  # after every other execution file
    run.recorder.close()
    release_space(snapshot.path)  # the reserve is not evidence: gone before the manifest lists the files
    seal_snapshot(snapshot)
    return result


def load_for_snapshot(snapshot_dir: Path) -> LoadedModel:
    """Load the model of a planned snapshot through its backend, for `execute_snapshot(..., loaded=)`.

    The frozen plan and model files are verified first, as `execute` does; a failed load raises
    (nothing is recorded: no snapshot is being executed). Any other planned snapshot of the same
    frozen model, dtype, loader and device can reuse the result.
    """
    snapshot = SnapshotDir(open_snapshot(snapshot_dir))
    plan, _ = verify_before_loading(snapshot)
    backend = get_backend(plan.request.model.backend)
    return backend.load(load_context(plan, runtime_of(backend).resolve_device(plan.request.model.device), snapshot.path))


def open_recorder(
    snapshot: SnapshotDir, plan: FrozenPlan, unit: tuple[Unit, int], origin: float, bar: LiveProgress | None, memory: MemoryProbe
) -> ProgressRecorder:
    """`progress.ndjson` at the request's cadence, counting the backend's `(unit, steps per unit)`;
    an unwritable store is a StoreError (nothing written yet)."""
    unit_name, per_unit = unit
    try:
        return ProgressRecorder(
            snapshot.open_stream(layout.PROGRESS),
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
        raise StoreError(describe_os_error(exc, snapshot.path)) from exc


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
