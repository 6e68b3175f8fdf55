"""A sweep driver owns every process it starts, and a later driver of the same sweep stops what a killed one left.

Each driver run carries a token (`GENRUN_SWEEP_DRIVER=<sweep id>/<pid>/<random>`) in its environment while its pool
lives: local workers, a Ray instance the driver starts (GCS, raylet, agents) and its actors inherit it. SIGKILL gives
a driver no chance to stop them, and Ray actors or agents do not always die with it; so `resume` (holding the sweep's
driver lock, hence the only live driver) finds processes carrying an earlier token of the same sweep in `/proc` and
stops them, and every driver stops what still carries its own token once its pool is closed. The token, not a
recorded PID, identifies a process: a PID can be reused, an environment entry with 64 random bits cannot be forged by
accident. A process on another machine (a Ray node) is out of reach here; the driver then waits for the item
snapshot it executes (`held_snapshots`).
"""

import contextlib
import os
import secrets
import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from genrun.schemas import layout

from .._locks import holder_pid, try_exclusive

TOKEN_VAR = "GENRUN_SWEEP_DRIVER"
STOP_TIMEOUT_S = 120  # a safety net for a process the kernel has not reaped yet, never a measurement
_PROC = Path("/proc")


def new_token(sweep_id: str) -> str:
    """This driver run's token: the sweep id first, so a later driver recognises an earlier one's processes."""
    return f"{sweep_id}/{os.getpid()}/{secrets.token_hex(8)}"


@contextlib.contextmanager
def carried(token: str) -> Iterator[None]:
    """The token in this process's environment (inherited by the processes the pool starts), removed after."""
    previous = os.environ.get(TOKEN_VAR)
    os.environ[TOKEN_VAR] = token
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TOKEN_VAR, None)
        else:
            os.environ[TOKEN_VAR] = previous


def _token_of(pid: int) -> str | None:
    """The token in a process's environment as it was started; `None` when it has none or cannot be read."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's process
        return None
    prefix = f"{TOKEN_VAR}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def processes_carrying(sweep_id: str, *, own: str | None = None, only_own: bool = False) -> list[int]:
    """PIDs (not this process) carrying a token of `sweep_id`: any but `own`, or only `own` when `only_own`."""
    found = []
    me = os.getpid()
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        token = _token_of(int(entry.name))
        if token is None or not token.startswith(f"{sweep_id}/"):
            continue
        if (token == own) == only_own:
            found.append(int(entry.name))
    return found


def stop_processes(pids: list[int], token_prefix: str) -> list[int]:
    """SIGKILL each process that still carries a token starting with `token_prefix` and wait until it has exited; the
    PIDs stopped. A pidfd pins the process first, so a PID reused meanwhile is never signalled."""
    pinned: dict[int, int] = {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        token = _token_of(pid)
        if token is None or not token.startswith(token_prefix):
            os.close(fd)
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            os.close(fd)
            continue
        pinned[pid] = fd
    deadline = time.monotonic() + STOP_TIMEOUT_S
    waiting = dict(pinned)
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting.values()), [], [], 1.0)  # a pidfd is readable once its process exited
        for pid in [p for p, fd in waiting.items() if fd in ready]:
            os.close(waiting.pop(pid))
    for fd in waiting.values():
        os.close(fd)
    return sorted(pinned)


def snapshot_executor(snapshot: Path) -> int | None:
    """The PID executing `snapshot` now (the holder of its execution lock, from /proc/locks), 0 when it is held by a
    process this machine cannot name (another node over a shared filesystem), `None` when nobody executes it."""
    try:
        fd = os.open(snapshot / layout.FROZEN_MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if try_exclusive(fd):
            return None  # free (the flock is released with the descriptor)
        return holder_pid(fd) or 0
    finally:
        os.close(fd)


def wait_until_free(snapshot: Path, poll_s: float = 0.5) -> None:
    """Block while another process executes `snapshot` (adopted: its own execution decides how it ends)."""
    while snapshot_executor(snapshot) is not None:
        time.sleep(poll_s)


class Takeover(NamedTuple):
    """What a driver found still running when it took a sweep over."""

    notes: dict[str, str]
    """Per item snapshot id that a process was executing: what became of that process (for the sweep's log)."""
    stopped: tuple[int, ...]
    """Every process of an earlier driver of this sweep that was stopped (workers, actors, a Ray instance's own)."""


def take_over(sweep_dir: Path, store: Path, snapshot_ids: set[str], token: str) -> Takeover:
    """Stop every process an earlier driver of this sweep left on this machine, and wait for any other process still
    executing one of `snapshot_ids` (adopted: its own seal decides the item); then the disk tells each item's state."""
    sweep_id = sweep_dir.name
    executing = {sid: snapshot_executor(store / sid) for sid in sorted(snapshot_ids)}
    stopped = stop_processes(processes_carrying(sweep_id, own=token), f"{sweep_id}/")
    notes: dict[str, str] = {}
    for sid, pid in executing.items():
        if pid is None:
            continue
        if pid in stopped:
            notes[sid] = f"its worker (PID {pid}) outlived that driver and was stopped by the next one"
            continue
        wait_until_free(store / sid)
        who = f"PID {pid}" if pid else "a process on another machine"
        notes[sid] = f"{who}, not started by a driver of this sweep on this machine, was still executing it: the next driver waited for it"
    return Takeover(notes, tuple(stopped))
