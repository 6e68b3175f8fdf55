"""`genrun execute`: run a planned snapshot with full instrumentation, then seal it.

Order:
1. before anything is loaded, refuse a snapshot that was already executed, verify every frozen
   file against `frozen-sha256.txt` (the plan digest), and check that genrun's code, the
   entry-point modules, the model's remote code and the model files still hash to what
   `code.json` / `model.json` froze (`FrozenMismatch` names what differs);
2. with `--require-approval` or `[policy] require_approval`, require an `approve` sign-off;
3. hold SIGINT/SIGTERM (`genrun.runner.interrupts`) from opening `progress.ndjson` to the seal; run the backend once;
4. write the terminal progress event, `determinism.json`, `generation-stop.json`, `result.json`;
5. seal the snapshot (the manifest, written last) — also after a model failure or a signal; only a failed
   write of the evidence itself (a full disk) leaves it unsealed, which every reader shows as incomplete.
"""

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

import orjson
from pydantic import BaseModel

from genrun.schemas import CodeIdentity, CodeSet, Determinism, ExecutionIdentity, GenerationStop, ModelIdentity, PeakMemory, Request, Result, Timings, TokenBudget, layout
from genrun.schemas.layout import NewerFormat, newer_format_message, recorded_genrun_version
from genrun.schemas.digests import parse_sha256sum, plan_digest, render_sha256sum, sha256_bytes, sha256_file
from genrun.schemas.progress import Unit

from ._io import RESERVE_NAME, release_space, reserve_space, write_model_atomic
from ._locks import lock_holder, try_exclusive
from .backends import Backend, BackendOutcome, ExecutionContext, LoadContext, LoadedModel, exception_info, get_backend
from .budget import resolve_device
from .code_identity import code_set, genrun_code_set
from .determinism import capture_determinism, deterministic_mode, with_sampling
from .errors import FrozenMismatch, GenrunError, SnapshotError, StoreError
from .input_files import verify_input_files
from .processor_identity import frozen_processor_dir
from .interrupts import EXIT_CODES, RunInterrupted, deferred, disarm, interrupt_gate, later_signals
from .live_progress import LiveProgress, wants_live
from .memory import MemoryProbe
from .recorder import ProgressRecorder
from .store import describe_os_error, open_snapshot, seal_snapshot

SEALING_RESERVE_FIXED = 1 << 20
"""Bytes held for the JSON artifacts, the manifest and one filesystem block per file."""
SEALING_RESERVE_MAX = 1 << 30
"""Never hold more than this (a budget of 30M ids)."""
FSYNC_EVERY_S = 5.0
"""Seconds between fsyncs of `progress.ndjson` (and one at the end)."""


class FrozenPlan(NamedTuple):
    """The frozen files execution reads."""

    request: Request
    code: CodeIdentity
    model: ModelIdentity
    budget: TokenBudget


class VerifiedIdentity(NamedTuple):
    """Digests recomputed before loading anything."""

    plan_digest: str
    code_digest: str
    model_digest: str


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
    origin = time.monotonic()
    snapshot_dir = open_snapshot(snapshot_dir)
    with execution_lock(snapshot_dir):
        return _execute_locked(snapshot_dir, origin, require_approval, live, loaded, allowed_signers, records or {})


@contextlib.contextmanager
def execution_lock(snapshot_dir: Path) -> Iterator[None]:
    """An exclusive `flock` on `frozen-sha256.txt` for the whole execution: a second `execute` of the same plan is
    refused naming the holder's PID (the kernel drops the lock when the holder dies, SIGKILL included)."""
    try:
        fd = os.open(snapshot_dir / layout.FROZEN_MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise FrozenMismatch(f"{snapshot_dir / layout.FROZEN_MANIFEST} cannot be opened as a regular file ({exc.strerror or exc}); "
                             "plan the request again") from None
    try:
        if not try_exclusive(fd):
            raise SnapshotError(f"snapshot {snapshot_dir} is already being executed by {lock_holder(fd)}; a snapshot runs once: "
                                "wait for it, or plan a new one with 'genrun plan REQUEST'")
        yield
    finally:
        os.close(fd)


def _execute_locked(
    snapshot_dir: Path, origin: float, require_approval: bool, live: bool | None, loaded: LoadedModel | None,
    allowed_signers: Path | None, records: Mapping[str, BaseModel],
) -> Result:
    plan, identity = verify_before_loading(snapshot_dir)
    approval_note = None
    policy = plan.request.policy.require_approval
    if require_approval or policy:
        from .signoff import check_approval, describe_approval

        approval_note = describe_approval(check_approval(snapshot_dir, allowed_signers, allow_unsigned=policy == "any"))
    backend = get_backend(plan.request.model.backend)
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
            recorder = open_recorder_or_keep_plan(snapshot_dir, plan, unit, origin, bar, memory)
            return _run_record_seal(snapshot_dir, plan, identity, backend, device, recorder, bar, loaded, origin,
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
) -> ProgressRecorder:
    """Open `progress.ndjson`, the first execution file; a signal while doing so removes it again, so the plan stays
    intact and executable (the signal is held until the file is open, so it is ours to remove)."""
    recorder = None
    try:
        with deferred():
            recorder = open_recorder(snapshot_dir, plan, unit, origin, bar, memory)
    except RunInterrupted:
        if recorder is not None:
            recorder.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot_dir / layout.PROGRESS)
        raise
    return recorder


def _run_record_seal(
    snapshot_dir: Path, plan: "FrozenPlan", identity: "VerifiedIdentity", backend: Backend, device: str,
    recorder: ProgressRecorder, bar: LiveProgress | None, loaded: LoadedModel | None, origin: float,
    *, approval_note: str | None, records: Mapping[str, BaseModel],
) -> Result:
    """Run the backend, write the terminal event, determinism, stop and result, then seal.

    The seal is written only after `result.json`: a failed write (a full disk) leaves the snapshot recognisably
    unsealed (`incomplete`/`running`) and raises a `StoreError` naming the store and its free space.
    """
    determinism: Determinism | None = None
    result_written = False
    try:
        try:
            ctx = ExecutionContext(
                **vars(load_context(plan, device, snapshot_dir)),
                snapshot_dir=snapshot_dir,
                recorder=recorder,
                planned_units=plan.budget.requested_units,
            )
            with bar if bar is not None else contextlib.nullcontext():  # the bar shows the terminal event's count too
                with deterministic_mode(plan.request, device) as determinism:
                    outcome = run_backend(backend, ctx, loaded)
                _write_terminal_event_on_a_full_disk(snapshot_dir, recorder, outcome)
        except RunInterrupted as exc:  # after the stream opened, before the backend's own handling
            disarm()
            outcome = _bare_outcome(recorder, signal=exc.signal_name)
            _write_terminal_event_on_a_full_disk(snapshot_dir, recorder, outcome)
        if determinism is None:
            determinism = capture_determinism(plan.request, device, strict=False)
        write_model_atomic(snapshot_dir / layout.DETERMINISM, with_sampling(determinism, snapshot_dir))
        for name, record in records.items():
            write_model_atomic(snapshot_dir / name, record)
        write_model_atomic(snapshot_dir / layout.STOP, GenerationStop(sequences=outcome.stops))
        result = build_result(plan, identity, outcome, recorder.memory, time.monotonic() - origin, per_row=recorder.generated)
        if approval_note is not None:
            result = result.model_copy(update={"notes": (approval_note, *result.notes)})
        write_model_atomic(snapshot_dir / layout.RESULT, result)
        result_written = True
        recorder.close()
        release_space(snapshot_dir)  # the reserve is not evidence: gone before the manifest lists the files
        seal_snapshot(snapshot_dir)
    except OSError as exc:
        raise StoreError(describe_os_error(exc, snapshot_dir) + ("" if result_written else "; the snapshot is left unsealed (incomplete)")) from exc
    finally:
        recorder.close()
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


def load_context(plan: "FrozenPlan", device: str, snapshot_dir: Path) -> LoadContext:
    """What the backend needs to load this plan's model."""
    return LoadContext(request=plan.request, model=plan.model, code=plan.code, device=device, import_paths=entrypoint_paths(plan.code),
                       frozen_processor_dir=frozen_processor_dir(snapshot_dir, plan.model))


# -- refusals, before anything is loaded ----------------------------------------------------------


def verify_before_loading(snapshot_dir: Path) -> tuple[FrozenPlan, VerifiedIdentity]:
    """Not executed yet, frozen files intact, then code and model unchanged; the frozen plan and the digests."""
    refuse_executed(snapshot_dir)
    digest = verify_plan_files(snapshot_dir)
    verify_input_files(snapshot_dir)  # files frozen by hash only (`[input] copy = false`)
    plan = load_frozen(snapshot_dir)
    return plan, VerifiedIdentity(digest, verify_code(plan.code), verify_model(plan.model))


def refuse_executed(snapshot_dir: Path) -> None:
    """A snapshot runs once: its progress and result are evidence and are never overwritten."""
    for name in (layout.RESULT, layout.PROGRESS, layout.MANIFEST):
        if (snapshot_dir / name).exists():
            raise SnapshotError(
                f"snapshot {snapshot_dir} was already executed ({name} exists); a snapshot runs once: "
                "plan a new one with 'genrun plan REQUEST' or 'genrun run REQUEST'"
            )


def load_frozen(snapshot_dir: Path) -> FrozenPlan:
    """Parse the frozen files (a file that no longer parses is a changed plan)."""
    models = ((layout.REQUEST, Request), (layout.CODE, CodeIdentity), (layout.MODEL, ModelIdentity), (layout.TOKEN_BUDGET, TokenBudget))
    loaded = []
    for name, model in models:
        try:
            loaded.append(model.model_validate_json((snapshot_dir / name).read_bytes()))
        except NewerFormat as exc:
            writer = exc.written_by or _planned_by(snapshot_dir)
            raise SnapshotError(f"frozen file {name} in {snapshot_dir} was {newer_format_message(exc.version, writer)}") from None
        except (OSError, ValueError) as exc:
            raise FrozenMismatch(f"frozen file {name} in {snapshot_dir} cannot be read as planned ({exc}); plan the request again") from None
    return FrozenPlan(*loaded)


def _planned_by(snapshot_dir: Path) -> str | None:
    try:
        return recorded_genrun_version(orjson.loads((snapshot_dir / layout.ENVIRONMENT).read_bytes()))
    except (OSError, orjson.JSONDecodeError):
        return None


def verify_plan_files(snapshot_dir: Path) -> str:
    """Recompute every `frozen-sha256.txt` entry; returns the plan digest."""
    manifest = snapshot_dir / layout.FROZEN_MANIFEST
    try:
        entries = parse_sha256sum(manifest.read_bytes())
    except ValueError as exc:
        raise FrozenMismatch(f"{manifest} is malformed ({exc}); the plan cannot be trusted: plan the request again") from None
    current = {}

    def digest_of(rel: str) -> str | None:
        path = snapshot_dir / rel
        current[rel] = sha256_file(path) if path.is_file() else None
        return current[rel]

    sources = [p.name for p in snapshot_dir.iterdir() if layout.is_request_source(p.name)]
    found = layout.check_frozen(entries, sources, digest_of)
    if found.not_frozen:
        raise FrozenMismatch(f"{layout.FROZEN_MANIFEST} does not list {', '.join(found.not_frozen)}; the plan was altered: plan the request again")
    if found.missing:
        raise FrozenMismatch(f"frozen file {found.missing[0]} is missing from {snapshot_dir}; the plan was altered: plan the request again")
    if found.changed:
        rel = found.changed[0]
        raise FrozenMismatch(
            f"frozen file {rel} changed since planning (sha256 {current[rel][:12]}… != frozen {entries[rel][:12]}…); "
            "a plan is never edited: plan the request again"
        )
    refuse_foreign_entries(snapshot_dir, entries)
    return plan_digest(snapshot_dir)


def refuse_foreign_entries(snapshot_dir: Path, frozen: Mapping[str, str]) -> None:
    """Nothing but the frozen files (and regular sign-off records in a real `signoffs/` directory) may be in a plan:
    a planted link (`outputs/` -> elsewhere) would make execute write, and the seal chmod, outside the store."""
    from genrun.analysis import walk_entries

    signoffs = snapshot_dir / layout.SIGNOFFS_DIR
    if signoffs.is_symlink() or (signoffs.exists() and not signoffs.is_dir()):
        raise FrozenMismatch(f"{signoffs} is not a directory (a link?); a plan holds only its frozen files: remove it or plan again")
    for rel, st in walk_entries(snapshot_dir):
        in_signoffs = rel.startswith(layout.SIGNOFFS_DIR + "/")
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise FrozenMismatch(f"{snapshot_dir / rel} is not a regular file (a link, FIFO or device); execute never writes through one: "
                                 "remove it or plan again")
        if rel not in (layout.FROZEN_MANIFEST, RESERVE_NAME) and rel not in frozen and not in_signoffs:
            raise FrozenMismatch(f"{snapshot_dir / rel} is not listed in {layout.FROZEN_MANIFEST}; a plan holds only its frozen files: "
                                 "remove it or plan again")


def verify_code(code: CodeIdentity) -> str:
    """genrun's code digest now, which must equal the frozen one; entry-point and remote code are checked too."""
    current = genrun_code_set()
    _compare_code("genrun's own code", code.genrun, current, "run the genrun version that planned it, or plan again with this one")
    for label, frozen in (("the entry-point code", code.entrypoint), ("the model's remote code", code.remote_code)):
        if frozen is not None:
            _compare_code(label, frozen, _rehash(frozen), "restore it, or plan the request again")
    return current.digest


def _rehash(frozen: CodeSet) -> CodeSet:
    root = Path(frozen.root)
    present = [root / f.path for f in frozen.files if (root / f.path).is_file()]
    return code_set(root, present)


def _compare_code(label: str, frozen: CodeSet, current: CodeSet, fix: str) -> None:
    if current.digest == frozen.digest:
        return
    raise FrozenMismatch(f"{label} changed since planning ({describe_differences(frozen.files, current.files)}); {fix}")


def describe_differences(frozen: tuple, current: tuple) -> str:
    """`changed: a, b; added: c; removed: d` from two `FileDigest` lists."""
    before = {f.path: f.sha256 for f in frozen}
    after = {f.path: f.sha256 for f in current}
    parts = []
    for word, names in (
        ("changed", sorted(p for p in before.keys() & after.keys() if before[p] != after[p])),
        ("added", sorted(after.keys() - before.keys())),
        ("removed", sorted(before.keys() - after.keys())),
    ):
        if names:
            parts.append(f"{word}: {', '.join(names)}")
    return "; ".join(parts) or "same files, different root"


def verify_model(model: ModelIdentity) -> str:
    """Re-digest the frozen model directory (cheap through the hash cache); it must match `model.json`."""
    from .model_identity import digest_model_files

    root = Path(model.resolved_path)
    if not root.is_dir():
        raise FrozenMismatch(f"model directory {root} (model.json resolved_path) no longer exists; restore it or plan again")
    try:
        files = digest_model_files(root)
    except GenrunError as exc:
        raise FrozenMismatch(f"model directory {root} can no longer be identified: {exc}") from None
    digest = sha256_bytes(render_sha256sum((f.path, f.sha256) for f in files))
    if digest != model.digest:
        raise FrozenMismatch(
            f"the model files in {root} changed since planning ({describe_differences(model.files, files)}); restore them or plan again"
        )
    return digest


def entrypoint_paths(code: CodeIdentity) -> tuple[Path, ...]:
    """Where planning found the entry-point/loader modules (the request file's directory for local modules)."""
    if code.entrypoint is None:
        return ()
    return (Path(code.entrypoint.root),)


# -- running --------------------------------------------------------------------------------------


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


def run_backend(backend: Backend, ctx: ExecutionContext, loaded: LoadedModel | None = None) -> BackendOutcome:
    """`backend.run(ctx, loaded)` with the signal handlers installed; whatever escapes it is recorded as a failure."""
    with interrupt_gate():
        try:
            return backend.run(ctx, loaded)
        except RunInterrupted as exc:  # landed outside the backend's own handling
            return _bare_outcome(ctx.recorder, signal=exc.signal_name)
        except BaseException as exc:  # a bug in the backend: still a sealed, failed snapshot
            return _bare_outcome(ctx.recorder, exception=exc)
        finally:
            disarm()


def _bare_outcome(recorder: ProgressRecorder, *, signal: str | None = None, exception: BaseException | None = None) -> BackendOutcome:
    return BackendOutcome(
        unit=recorder.unit,
        generated=recorder.generated,
        generated_tokens=recorder.steps,
        load_s=None,
        first_unit_s=None,
        decode_s=None,
        stops=(),
        exception=exception_info(exception) if exception is not None else None,
        signal=signal,
    )


def _write_terminal_event_on_a_full_disk(snapshot_dir: Path, recorder: ProgressRecorder, outcome: BackendOutcome) -> None:
    """The terminal event; on a full disk (the disk filled while generating), with the sealing reserve given back."""
    try:
        write_terminal_event(recorder, outcome)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not release_space(snapshot_dir):
            raise
        write_terminal_event(recorder, outcome)


def write_terminal_event(recorder: ProgressRecorder, outcome: BackendOutcome) -> None:
    """`interrupted`, `exception` or `end`, unless the stream is already closed."""
    if recorder.closed:
        return
    if outcome.signal is not None:
        recorder.interrupted(outcome.signal)
    elif outcome.exception is not None:
        recorder.exception(outcome.exception.type, outcome.exception.message)
    else:
        recorder.end()


def build_result(plan: FrozenPlan, identity: VerifiedIdentity, outcome: BackendOutcome, memory: MemoryProbe, total_s: float,
                 per_row: int | None = None) -> Result:
    """`result.json` from the outcome: status and exit code, timings, rates (summed over rows and per row), peaks, identities.

    `per_row` is the furthest row's unit count as progress.ndjson counts it.
    """
    if outcome.signal is not None:
        status, exit_code = "interrupted", EXIT_CODES.get(outcome.signal, 130)
    elif outcome.exception is not None:
        status, exit_code = "failed", 1
    else:
        status, exit_code = "succeeded", 0
    rate = outcome.generated / outcome.decode_s if outcome.decode_s else None
    cuda = memory.cuda()
    units = plan.request.units
    return Result(
        status=status,
        exit_code=exit_code,
        unit=outcome.unit,
        generated=outcome.generated,
        generated_tokens=outcome.generated_tokens,
        units_per_s=rate,
        rows=len(outcome.stops) or None,
        units_per_s_per_row=per_row / outcome.decode_s if outcome.decode_s and per_row is not None else None,
        produced_seconds=outcome.produced_seconds,
        requested_seconds=units.requested_seconds if outcome.unit == "frame" else None,
        timings=Timings(load_s=outcome.load_s, first_token_s=outcome.first_unit_s, decode_s=outcome.decode_s, total_s=total_s),
        peak_memory=PeakMemory(
            rss_bytes=memory.peak_rss_bytes(),
            cuda_allocated_bytes=cuda.peak_allocated if cuda else None,
            cuda_reserved_bytes=cuda.peak_reserved if cuda else None,
        ),
        exception=outcome.exception,
        signal=outcome.signal,
        execution_identity=ExecutionIdentity(code_digest=identity.code_digest, model_digest=identity.model_digest, plan_digest=identity.plan_digest),
        outputs=outcome.outputs,
        forced=plan.budget.forced,
        notes=(*outcome.notes, *_signal_notes(outcome)),
    )


def _signal_notes(outcome: BackendOutcome) -> tuple[str, ...]:
    later = later_signals()
    if not later:
        return ()
    first = f" after {outcome.signal}" if outcome.signal else " after generation ended"
    return (f"received {', '.join(later)}{first}; counted, not acted on, so the evidence could be written and sealed",)


__all__ = ["execute_snapshot", "load_for_snapshot", "refuse_executed", "verify_code", "verify_model", "verify_plan_files"]
