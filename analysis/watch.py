"""`genrun watch`: follow a snapshot's progress stream from another terminal, read-only.

A `ProgressTail` reads the complete lines appended to `progress.ndjson` since the last poll;
`assess` turns what has been read into a typed `WatchUpdate`: units so far, windowed, recent and
cumulative rate, memory, seconds since the last record, an ETA against the budget, and a stall
flag. Whether the writer is still alive comes from the advisory lock the recorder holds on
`progress.ndjson` for as long as it writes (the kernel drops it when the process dies, SIGKILL
included); a shared, non-blocking probe of that lock changes nothing on disk.

Every file is read through a read-only `SnapshotDir`: a `progress.ndjson` that is a FIFO, a device,
a link or larger than its bound raises its `ArtifactError` (the CLI reports it, exit 1) instead of
hanging or exhausting memory.

Torch-free: imports only the standard library, pydantic and `genrun.schemas`.
"""

import fcntl
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, NamedTuple, TypedDict

from pydantic import BaseModel, ConfigDict

from genrun.schemas import AnyEvent, GenerationStop, Request, Result, StartEvent, TokenBudget, layout
from genrun.snapshot_dir import ArtifactError, ArtifactMissing, SnapshotDir, parse_progress_lines

WatchState = Literal["waiting", "running", "stalled", "sealed", "incomplete", "not_executing"]
Liveness = Literal["alive", "gone", "unknown"]

STALL_FACTOR = 3
"""Default `--stall-after`: this many times the request's `[progress] every_seconds`."""
RECENT_RECORDS = 8
"""Records the recent rate and the ETA fit look back over."""
INCOMPLETE_EXIT = 4
"""Exit code of `watch` when the writer is gone and the snapshot was never sealed (the run's own codes are 0-3, 130, 143)."""
NOT_EXECUTING_EXIT = 5
"""Exit code of `watch` on a planned snapshot that no process is executing (nobody holds its execution lock)."""
GROWTH_THRESHOLD = 0.05
"""Fit the growth of seconds-per-unit only when it grows by at least this fraction across the recent windows."""
TERMINAL_EVENTS = ("end", "exception", "interrupted")


class WatchUpdate(BaseModel):
    """One observation of a snapshot (also one `--json` line)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    snapshot_id: str
    state: WatchState
    """waiting (no progress yet), running, stalled, sealed (the run ended and sealed), incomplete (writer gone, never sealed)."""
    unit: str | None
    """What the run counts: the start record's unit, before it the planned budget's (`None` when neither can be read)."""
    generated: int | None
    """Units so far (the furthest row)."""
    planned_units: int | None
    """Units the budget allows (the start record's `planned_units`)."""
    rows: int | None
    """Rows decoded in parallel."""
    records: int
    """Progress records read so far."""
    last_event: str | None
    window_units_per_s: float | None
    """Per row, since the record before the last one (the recorder's own window)."""
    recent_units_per_s: float | None
    """Per row, over the last few records (what the ETA uses)."""
    cumulative_units_per_s: float | None
    """Per row, since the first unit."""
    rss_bytes: int | None
    cuda_allocated_bytes: int | None
    cuda_reserved_bytes: int | None
    seconds_since_last_record: float | None
    """Now minus the wall time of the last record."""
    eta_s: float | None
    """Seconds until `planned_units` at the recent pace (EOS may end the run sooner)."""
    eta_basis: str | None
    """How `eta_s` was computed."""
    stall_after_s: float
    stalled: bool
    """No record for more than `stall_after_s` seconds while the run has not ended."""
    writer: Liveness
    """Whether a process still holds the writer's lock on progress.ndjson."""
    status: str | None = None
    """result.json status once sealed."""
    exit_code: int | None = None
    """The run's exit code once sealed; `INCOMPLETE_EXIT` when incomplete."""
    stop_reasons: tuple[str, ...] = ()
    """Per row, once sealed."""
    message: str = ""
    """One line for a person."""


class _Observed(TypedDict):
    """The `WatchUpdate` fields read from the events, the same whatever the verdict (see `WatchUpdate` for each)."""

    snapshot_id: str
    unit: str | None
    generated: int | None
    planned_units: int | None
    rows: int | None
    records: int
    last_event: str | None
    window_units_per_s: float | None
    recent_units_per_s: float | None
    cumulative_units_per_s: float | None
    rss_bytes: int | None
    cuda_allocated_bytes: int | None
    cuda_reserved_bytes: int | None
    seconds_since_last_record: float | None
    eta_s: float | None
    eta_basis: str | None
    stall_after_s: float


class ProgressTail:
    """Reads only the complete lines appended to a snapshot's `progress.ndjson` since the previous call (a partial
    last line waits for its newline)."""

    def __init__(self, snapshot: Path) -> None:
        self.snapshot = SnapshotDir(snapshot)
        self.events: list[AnyEvent] = []
        self.invalid_lines = 0
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[AnyEvent]:
        """New events since the last poll; [] when the file does not exist yet. Raises `ArtifactError` for a file
        that is not a regular one (a FIFO would block a plain read forever) or is over its bound."""
        try:
            data = self.snapshot.read_bytes(layout.PROGRESS, offset=self._offset)
        except ArtifactMissing:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        new, invalid = parse_progress_lines([line for line in lines if line.strip()])
        self.invalid_lines += len(invalid)
        self.events.extend(new)
        return new


def writer_liveness(progress: Path) -> Liveness:
    """`alive` when a process holds the recorder's exclusive lock on progress.ndjson, `gone` when none does."""
    try:
        fd = os.open(progress, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # never blocks on a FIFO put in its place
    except OSError:
        return "unknown"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "alive"
    except OSError:  # a filesystem without flock (ENOLCK on some network mounts): cannot tell
        return "unknown"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "gone"
    finally:
        os.close(fd)


def execution_lock_held(snapshot: Path) -> bool | None:
    """Whether a process holds the executor's flock on `frozen-sha256.txt` (taken before the weights load)."""
    return flock_held(snapshot / layout.FROZEN_MANIFEST)


def flock_held(path: Path) -> bool | None:
    """Whether any process holds a flock on `path` (the executor's on `frozen-sha256.txt`, a sweep driver's on `sweep-plan.json`).

    Read from /proc/locks rather than probed with a lock of our own: a probe, however short, could
    make a starting `genrun execute` (or `sweep execute`) refuse as "already being executed". None where /proc/locks is absent.
    """
    try:
        stat = os.stat(path)
        inode, device = str(stat.st_ino), stat.st_dev
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    return any(len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == wanted for fields in (line.split() for line in lines))


def planned_unit(snapshot: Path) -> layout.Unit | None:
    """What the run will count, as its backend planned it (`token-budget.json`, frozen with every plan): watch names it
    before the start record repeats it, so a diffusion run is never shown counting tokens. `None` when that file cannot
    be read (damage is for `genrun verify` to name)."""
    try:
        return SnapshotDir(snapshot).read(layout.TOKEN_BUDGET, TokenBudget).units
    except ArtifactError:
        return None


def default_stall_after(snapshot: Path) -> float:
    """3 × the request's `[progress] every_seconds` (a record is due at least that often while units are produced)."""
    try:
        request = SnapshotDir(snapshot).read(layout.REQUEST, Request)
    except ArtifactError:
        return STALL_FACTOR * 30.0
    return STALL_FACTOR * request.progress.every_seconds


class Eta(NamedTuple):
    """Seconds to the budget and how they were estimated."""

    seconds: float | None
    basis: str | None
    recent_rate: float | None


def estimate_eta(events: Sequence[AnyEvent], planned: int | None, unit: str) -> Eta:
    """ETA from the recent records, not the cumulative rate: attention cost grows with context, so late tokens are slower.

    With 3+ recent windows whose seconds-per-unit grows with position, fit that linear growth and
    integrate it to the budget; otherwise use the recent windowed rate.
    """
    timed = [e for e in events if e.event in ("first_token", "progress")]
    recent = timed[-(RECENT_RECORDS + 1):]
    if len(recent) < 2 or recent[-1].generated <= recent[0].generated or recent[-1].t <= recent[0].t:
        return Eta(None, None, None)
    rate = (recent[-1].generated - recent[0].generated) / (recent[-1].t - recent[0].t)
    done = recent[-1].generated
    if planned is None or planned <= done:
        return Eta(None if planned is None else 0.0, None if planned is None else "budget reached", rate)
    remaining = planned - done
    windows = [((a.generated + b.generated) / 2, (b.t - a.t) / (b.generated - a.generated))
               for a, b in zip(recent, recent[1:]) if b.generated > a.generated]
    fit = _linear_fit(windows) if len(windows) >= 3 else None
    if fit is not None:
        a, b = fit  # seconds per unit at position n: a + b·n
        span = windows[-1][0] - windows[0][0]
        mean = sum(y for _, y in windows) / len(windows)
        if b * span > GROWTH_THRESHOLD * mean and a + b * done > 0:  # a real trend, not float noise or jitter
            seconds = a * remaining + b * (planned**2 - done**2) / 2
            return Eta(seconds, f"seconds per {unit} growing with position, fitted over the last {len(windows)} windows", rate)
    return Eta(remaining / rate, f"recent windowed rate over the last {len(recent) - 1} records", rate)


def _linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope); None when x does not vary."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def assess(snapshot: Path, tail: ProgressTail, stall_after: float, now: datetime | None = None,
           waited_s: float = 0.0, stall_reported: bool = False) -> WatchUpdate:
    """The state of the snapshot now, from the events read so far and the files on disk.

    An executor that is gone (no process holds the execution lock, which it takes before the progress stream exists and
    keeps until the seal) is `incomplete` at once. Where the lock cannot be read, a stall is reported once as `stalled`
    before it can become `incomplete` (writer gone), so an operator sees the warning and then the verdict, never a silent exit.
    """
    now = now or datetime.now(timezone.utc)
    events = tail.events
    start = next((e for e in events if isinstance(e, StartEvent)), None)
    last = events[-1] if events else None
    unit = start.unit if start is not None else planned_unit(snapshot)
    planned = start.planned_units if start is not None else None
    since = _seconds_since(start, last, now)
    eta = estimate_eta(events, planned, unit or "unit")  # without a start record there is no rate, so no basis to word
    common = _Observed(
        snapshot_id=snapshot.name, unit=unit, generated=last.generated if last else None, planned_units=planned,
        rows=start.rows if start is not None else None, records=len(events), last_event=last.event if last else None,
        window_units_per_s=getattr(_last_progress(events), "window_units_per_s", None), recent_units_per_s=eta.recent_rate,
        cumulative_units_per_s=getattr(_last_progress(events), "units_per_s", None),
        rss_bytes=last.rss_bytes if last else None, cuda_allocated_bytes=last.cuda_allocated_bytes if last else None,
        cuda_reserved_bytes=last.cuda_reserved_bytes if last else None, seconds_since_last_record=since,
        eta_s=eta.seconds, eta_basis=eta.basis, stall_after_s=stall_after,
    )
    if (snapshot / layout.MANIFEST).is_file():
        return _sealed(snapshot, common)
    progress = snapshot / layout.PROGRESS
    if not progress.is_file():
        held = execution_lock_held(snapshot)
        if held is False and waited_s > stall_after:
            return WatchUpdate(state="not_executing", stalled=False, writer="gone", exit_code=NOT_EXECUTING_EXIT,
                               message=f"planned, not executing: no process holds its execution lock after {waited_s:.0f} s; "
                                       f"run it with 'genrun execute {snapshot}', then watch again", **common)
        if held is False:  # said at once, not after --stall-after: an `execute` starting now takes the lock within it
            return WatchUpdate(state="waiting", stalled=False, writer="unknown", **common,
                               message=f"waiting: no process is executing this plan yet (start it with 'genrun execute {snapshot}'); "
                                       f"watch gives up if none has after {stall_after:g} s")
        note = (f"; nothing after {waited_s:.0f} s: not executed yet, or still loading weights" if waited_s > stall_after else "")
        return WatchUpdate(state="waiting", stalled=False, writer="unknown", message=f"waiting for {layout.PROGRESS}{note}", **common)
    last_event = last.event if last is not None else None
    ended = last_event in TERMINAL_EVENTS
    if execution_lock_held(snapshot) is False:  # the executor died (SIGKILL, `os._exit` in user code): it will never seal
        if (snapshot / layout.MANIFEST).is_file():  # it sealed and let go of the lock since the check above
            return _sealed(snapshot, common)
        return WatchUpdate(state="incomplete", stalled=False, writer="gone", exit_code=INCOMPLETE_EXIT,
                           message=f"incomplete: the writer is gone (no process holds its execution lock: the executor ended "
                                   f"without sealing it); inspect with 'genrun report {snapshot}'", **common)
    quiet = since if since is not None else waited_s
    stalled = quiet > stall_after
    writer = writer_liveness(progress) if stalled else "alive" if not ended else "unknown"
    if stalled and writer == "gone" and (stall_reported or ended):
        why = f"'{last_event}' recorded but never sealed" if ended else f"no record for {quiet:.0f} s and no process writes it"
        return WatchUpdate(state="incomplete", stalled=not ended, writer=writer, exit_code=INCOMPLETE_EXIT,
                           message=f"incomplete: the writer is gone ({why}); inspect with 'genrun report {snapshot}'", **common)
    if ended:
        return WatchUpdate(state="running", stalled=False, writer=writer, message=f"'{last_event}' recorded; waiting for the seal", **common)
    if not events and writer == "alive":  # the cadence counts from the start record: loading is not a stall
        return WatchUpdate(state="waiting", stalled=False, writer=writer, message=f"loading: no start record yet after {quiet:.0f} s; "
                           "the run's process is alive (progress records begin once the weights are loaded)", **common)
    if stalled:
        alive = {"alive": "its writer is still alive", "gone": "no process writes it any more"}.get(writer, "cannot tell whether its writer is alive")
        what = f"no progress record for {quiet:.0f} s" if events else f"no progress record yet after {quiet:.0f} s (loading weights?)"
        return WatchUpdate(state="stalled", stalled=True, writer=writer, message=f"STALL: {what} (--stall-after {stall_after:g} s); {alive}",
                           **common)
    return WatchUpdate(state="running", stalled=False, writer=writer, message="", **common)


def _sealed(snapshot: Path, common: _Observed) -> WatchUpdate:
    files = SnapshotDir(snapshot)
    try:
        result = files.read(layout.RESULT, Result)
    except ArtifactError as exc:
        return WatchUpdate(state="incomplete", stalled=False, writer="gone", exit_code=INCOMPLETE_EXIT,
                           message=f"sealed but {layout.RESULT} is unreadable ({exc.reason}); run 'genrun verify {snapshot}'", **common)
    reasons: tuple[str, ...] = ()
    try:
        stop = files.read_optional(layout.STOP, GenerationStop)  # a run that failed while loading has none; its status says why
        reasons = tuple(s.reason for s in stop.sequences) if stop is not None else ()
    except ArtifactError:
        pass  # damage is for 'genrun verify' to name; watch reports the run's status
    listed = ", ".join(reasons) or "no stop record"
    observed = common.copy()
    if observed["generated"] is None:
        observed["generated"] = result.generated
    return WatchUpdate(state="sealed", stalled=False, writer="gone", status=result.status, exit_code=result.exit_code, stop_reasons=reasons,
                       message=f"sealed: {result.status} (exit {result.exit_code}), {result.generated} {result.unit}s; stopped by {listed}",
                       **observed)


def _last_progress(events: Sequence[AnyEvent]) -> AnyEvent | None:
    return next((e for e in reversed(events) if e.event in ("progress", "end")), None)


def _seconds_since(start: StartEvent | None, last: AnyEvent | None, now: datetime) -> float | None:
    """Records carry `t` since the run's start; the start record carries its wall time."""
    if start is None or last is None:
        return None
    began = datetime.fromisoformat(start.wall_time)
    return max(0.0, (now - began).total_seconds() - (last.t - start.t))
