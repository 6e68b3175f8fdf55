"""Run a planned sweep: schedule items onto a pool, retry lost ones, record every attempt, seal.

State comes from disk, not memory, so `resume` after a killed driver is the same code: an item
whose latest snapshot is sealed is done (never re-run); one whose snapshot started but never
sealed was lost with the driver and is retried as a new snapshot (the incomplete one is kept);
one never started runs now.
"""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from genrun.schemas import GenerationStop, Result, layout
from genrun.schemas.digests import snapshot_digest
from genrun.schemas.sweep import ItemAttempt, ItemOutcome, ItemStatus, SweepPlan, SweepResult, SweepStatus
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from .._locks import held_exclusively
from ..errors import SnapshotError
from ..interrupts import EXIT_CODES
from ..store import is_sealed
from . import ownership
from .pools import Died, Finished, WorkerPool
from .store import AttemptLog, copy_plan, open_sweep, read_attempts, seal_sweep

_M = TypeVar("_M", bound=BaseModel)

POLL_S = 0.5  # seconds between checks for a signal while items run


@dataclass
class ItemState:
    """One item as the driver tracks it."""

    index: int
    attempts: list[str]
    """Snapshot ids, oldest first."""
    outcome: ItemOutcome | None = None
    """Set once the item is final."""
    lost: int = 0
    """Attempts lost so far."""
    taken_over: tuple[ItemStatus, str] | None = None
    """Its latest attempt was running when a previous driver died: how it ended, logged when this driver takes over."""


@dataclass
class SweepRun:
    """What `execute_sweep` returns."""

    sweep_dir: Path
    result: SweepResult
    exit_code: int
    """0 every item succeeded; 1 any failed or lost; 130/143 interrupted."""
    stopped_by: str | None = None
    leftovers: tuple[int, ...] = ()
    """PIDs of processes an earlier driver of this sweep left running, stopped when this one took over."""


_STOPPING = (signal.SIGINT, signal.SIGTERM)


@dataclass
class _Signals:
    fired: str | None = None
    names: list[str] = field(default_factory=list)
    installed: bool = False

    def handler(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        self.names.append(name)
        self.fired = self.fired or name

    def reinstall(self) -> None:
        """Take the signals back after a pool's start-up (`ray.init` installs its own SIGTERM handler: exit at once)."""
        if self.installed:
            for sig in _STOPPING:
                signal.signal(sig, self.handler)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_Signals]:
    """SIGINT/SIGTERM only set a flag: the driver stops scheduling and lets running items end."""
    seen = _Signals()
    if threading.current_thread() is not threading.main_thread():  # library use from a thread: signals stay the caller's
        yield seen
        return
    previous = {sig: signal.signal(sig, seen.handler) for sig in _STOPPING}
    seen.installed = True
    try:
        yield seen
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def execute_sweep(sweep_dir: Path, pool_factory: Callable[[SweepPlan], WorkerPool], on_event: Callable[[str, ItemOutcome | None, int, int], None] | None = None) -> SweepRun:
    """Run every item not yet done, `retries` more times for lost ones; seal the sweep. Also resumes.

    One driver at a time: a second `sweep execute`/`resume` of the same sweep is refused naming the first's PID."""
    sweep_dir, plan = open_sweep(sweep_dir)
    # the store as it is now (moved, or a copy): its items run and are judged there, never at the recorded path
    plan = plan.model_copy(update={"store": str(plan.items_store(sweep_dir))})
    token = ownership.new_token(sweep_dir.name)
    # The driver's one `SnapshotDir` of the sweep: its log and its seal land in the directory opened here.
    with SnapshotDir(sweep_dir, writable=True).held_open() as sweep, _driver_lock(sweep_dir), ownership.carried(token):
        return _execute_sweep_locked(sweep, plan, pool_factory, on_event, token)


@contextlib.contextmanager
def _driver_lock(sweep_dir: Path) -> Iterator[None]:
    """An exclusive `flock` on `sweep-plan.json` while this driver runs (the kernel drops it when the driver dies, SIGKILL
    included): two drivers would run the same items twice and record outcomes their items contradict."""
    with held_exclusively(
        sweep_dir / layout.SWEEP_PLAN, extra_flags=os.O_CLOEXEC,
        unopenable=lambda why: SnapshotError(f"{sweep_dir / layout.SWEEP_PLAN} cannot be opened as a regular file ({why}); "
                                             "plan the sweep again"),
        busy=lambda holder: SnapshotError(f"sweep {sweep_dir} is already being run by {holder}; one driver runs a sweep at a time: "
                                          "wait for it to end (or stop it), then 'genrun sweep resume' it")):
        yield


def _execute_sweep_locked(sweep: SnapshotDir, plan: SweepPlan, pool_factory: Callable[[SweepPlan], WorkerPool],
                          on_event: Callable[[str, ItemOutcome | None, int, int], None] | None, token: str) -> SweepRun:
    sweep_dir = sweep.path
    if sweep.has(layout.MANIFEST):
        raise SnapshotError(f"sweep {sweep_dir} is already sealed (see 'genrun verify {sweep_dir}'); plan a new sweep to run it again")
    store = Path(plan.store)
    # Nothing of an earlier driver may still run an item while this one judges the items from disk: a worker that
    # outlived it would seal an item this driver had logged lost and run again.
    takeover = ownership.take_over(sweep_dir, store, _started_snapshots(sweep, plan), token)
    states = recover_states(sweep, plan, takeover.notes)
    log = AttemptLog(sweep)
    origin = time.monotonic()
    total = len(states)
    done = 0
    notify = on_event or (lambda *_: None)
    for state in states:
        if state.taken_over is not None:
            _log_end(log, state, *state.taken_over, origin, None)
        if state.outcome is not None:  # items an earlier driver finished, counted one by one as they are shown
            done += 1
            notify("done", state.outcome, done, total)
    pending = [s for s in states if s.outcome is None]
    pending.reverse()  # pop() from the end takes items in order
    pool: WorkerPool | None = None
    running: dict[int, ItemState] = {}
    worker_of: dict[int, str] = {}
    """Per busy slot, the worker its item was handed to (a batching worker's lanes are renamed by the first `replace`)."""
    with _stop_on_signals() as signals:
        try:
            if pending:
                pool = pool_factory(plan)
                signals.reinstall()
            names = pool.names() if pool else []
            idle = list(range(pool.slots)) if pool else []
            interrupted_sent = False
            while (pending and not signals.fired) or running:
                assert pool is not None, "pending or running items: the pool was made above"
                while idle and pending and not signals.fired:
                    slot, state = idle.pop(0), pending.pop()
                    snapshot = _snapshot_to_run(store, state, plan, log, origin)
                    log.append(ItemAttempt(event="started", item=state.index, attempt=len(state.attempts), snapshot_id=snapshot.name,
                                           t=time.monotonic() - origin, worker=names[slot]))
                    running[slot], worker_of[slot] = state, names[slot]
                    pool.submit(slot, str(snapshot))
                if signals.fired and not interrupted_sent:
                    interrupted_sent = True
                    for slot in running:
                        pool.interrupt(slot)
                for event in pool.wait(POLL_S) if running else []:
                    state = running.pop(event.slot)
                    if isinstance(event, Finished):
                        state.outcome = outcome_of(store, state, event.report.status, event.report.message)
                        idle.append(event.slot)
                    else:
                        state.lost += 1
                        _log_end(log, state, "lost", event.message, origin, worker_of[event.slot])
                        pool.replace(event.slot)
                        names = pool.names()
                        idle.append(event.slot)
                        if state.lost <= plan.sweep.retries and not signals.fired:
                            pending.append(state)
                            notify("retry", None, done, total)
                            continue
                        state.outcome = outcome_of(store, state, "lost", event.message)
                    if state.outcome.status != "lost":
                        _log_end(log, state, state.outcome.status, state.outcome.message, origin, worker_of[event.slot])
                    done += 1
                    notify("done", state.outcome, done, total)
        finally:
            if pool is not None:
                pool.close()
            log.close()
            # A Ray instance this driver started can leave its agents running after `ray.shutdown()`: stop them now.
            ownership.stop_processes(ownership.processes_carrying(sweep_dir.name, own=token, only_own=True), token)
    outcomes: list[ItemOutcome] = []
    for state in states:
        if state.outcome is None:
            state.outcome = ItemOutcome(index=state.index, status="not_run", snapshot_id=state.attempts[-1], snapshot_digest=None,
                                        attempts=tuple(state.attempts), stop_reasons=(), generated=None,
                                        message="the sweep was interrupted before this item ran (its snapshot stays planned)")
        outcomes.append(state.outcome)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    status: SweepStatus = "interrupted" if signals.fired else "completed"
    result = SweepResult(status=status, counts=counts, items=tuple(outcomes))
    seal_sweep(sweep, result)
    if signals.fired:
        code = EXIT_CODES.get(signals.fired, 130)
    else:
        code = 0 if counts.get("succeeded", 0) == len(outcomes) else 1
    return SweepRun(sweep_dir, result, code, signals.fired, takeover.stopped)


def _started_snapshots(sweep: SnapshotDir, plan: SweepPlan) -> set[str]:
    """Every item snapshot a driver of this sweep may have handed to a worker."""
    return {item.snapshot_id for item in plan.items} | {r.snapshot_id for r in read_attempts(sweep) if r.event == "started"}


def recover_states(sweep: SnapshotDir, plan: SweepPlan, notes: dict[str, str] | None = None) -> list[ItemState]:
    """Each item's attempts from the log and the state of its latest snapshot on disk. `notes`: per snapshot id, what
    became of a process that was still executing it when this driver took over (`ownership.take_over`)."""
    notes = notes or {}
    store = Path(plan.store)
    states = [ItemState(item.index, [item.snapshot_id]) for item in plan.items]
    ended: set[tuple[int, str]] = set()
    for record in read_attempts(sweep):
        if not 0 <= record.item < len(states):
            raise SnapshotError(f"{sweep.path / layout.SWEEP_PROGRESS} names item {record.item}, but the sweep plans items 0 to "
                                f"{len(states) - 1}; the sweep's log was altered: nothing it names is run")
        state = states[record.item]
        if record.event == "started" and record.snapshot_id not in state.attempts:
            state.attempts.append(record.snapshot_id)
        if record.event == "ended":
            ended.add((record.item, record.snapshot_id))
            if record.status == "lost":
                state.lost += 1
    for state in states:
        latest = store / state.attempts[-1]
        note = notes.get(latest.name)
        unrecorded = (state.index, latest.name) not in ended
        if is_sealed(latest):
            status, message = _sealed_status(latest)
            state.outcome = outcome_of(store, state, status, message)
            if unrecorded and note:  # sealed by a process that outlived the driver: the log says who ended it
                state.taken_over = (status, f"sealed after the driver stopped: {note}")
        elif (latest / layout.PROGRESS).exists() and unrecorded:
            state.lost += 1  # the driver died with this item running; the incomplete snapshot stays as evidence
            state.taken_over = ("lost", "the driver stopped while this item ran" + (f"; {note}" if note else ""))
            if state.lost > plan.sweep.retries:
                state.outcome = outcome_of(store, state, "lost", "the driver stopped while this item ran; no retries left")
    return states


def _snapshot_to_run(store: Path, state: ItemState, plan: SweepPlan, log: AttemptLog, origin: float) -> Path:
    """The latest snapshot when it has never started, else a fresh copy of its plan (a retry)."""
    latest = store / state.attempts[-1]
    if not (latest / layout.PROGRESS).exists() and not is_sealed(latest):
        return latest
    fresh = copy_plan(store, latest)
    state.attempts.append(fresh.name)
    return fresh


def _log_end(log: AttemptLog, state: ItemState, status: ItemStatus, message: str | None, origin: float, worker: str | None) -> None:
    log.append(ItemAttempt(event="ended", item=state.index, attempt=len(state.attempts), snapshot_id=state.attempts[-1],
                           t=time.monotonic() - origin, worker=worker, status=status, message=message))


def _sealed_status(snapshot: Path) -> tuple[ItemStatus, str | None]:
    result = _read_item(snapshot, layout.RESULT, Result)
    if result is None:
        return "failed", "sealed without result.json"
    exc = result.exception
    return result.status, (f"{exc.type}: {exc.message}" if exc else result.signal)


def outcome_of(store: Path, state: ItemState, status: ItemStatus, message: str | None) -> ItemOutcome:
    """The item's final record, read from its latest snapshot (digest only when sealed)."""
    latest = store / state.attempts[-1]
    stop = _read_item(latest, layout.STOP, GenerationStop)
    result = _read_item(latest, layout.RESULT, Result)
    return ItemOutcome(
        index=state.index,
        status=status,
        snapshot_id=latest.name,
        snapshot_digest=snapshot_digest(latest) if is_sealed(latest) else None,
        attempts=tuple(state.attempts),
        stop_reasons=tuple(sorted({s.reason for s in stop.sequences})) if stop else (),
        generated=result.generated if result else None,
        message=message,
    )


def _read_item(snapshot: Path, name: str, model: type[_M]) -> _M | None:
    """An item snapshot's artifact; `None` when absent or damaged (the item's own verify names the damage)."""
    try:
        return SnapshotDir(snapshot).read(name, model)
    except ArtifactError:
        return None
