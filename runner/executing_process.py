"""Only the process that executes a snapshot writes or seals it.

User code (a loop, an entry point) may `fork`. A child that returns into genrun, instead of ending with
`os._exit`, would go on to write the evidence and seal the snapshot a second time, beside the executing
process. So every write and seal entry asks `refuse_other_process` first: in any other process it writes
one line to stderr, leaves a note for the executing process on a pipe (never in the snapshot) and exits
at once, without unwinding into code that writes. The executing process reads the notes once its
generate step is over (`forked_returns`) and fails the run naming the child.

A child that returns only after the executing process sealed is still stopped untouched; the run it came
from is not failed after the fact (a sealed snapshot is never rewritten).
"""

import contextlib
import errno
import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

CHILD_EXIT = 70
"""How a forked child that returned into genrun ends (EX_SOFTWARE: an internal error of the program it ran)."""

_lock = threading.Lock()
_pid: int | None = None
"""The executing process, while at least one execution runs in it (a batching worker runs several on threads)."""
_running = 0
_pipe: tuple[int, int] | None = None
_notes: list[str] = []


@contextlib.contextmanager
def executing(snapshot_dir: Path) -> Iterator[None]:
    """Mark this process as the one executing `snapshot_dir` until the block ends."""
    global _pid, _running, _pipe
    with _lock:
        if _pipe is None or _pid != os.getpid() or not stat.S_ISFIFO(_fstat_mode(_pipe[0])):  # a fresh process, a child of an
            # executing one, or a pipe user code closed: a new one
            _pipe, _running = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC), 0
        if _running == 0:  # notes of children of earlier runs (returned after their seal) are not this run's
            _drain(_pipe[0])
            _notes.clear()
        _pid, _running = os.getpid(), _running + 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1


def refuse_other_process(what: str, snapshot_dir: Path | None = None) -> None:
    """In a process other than the executing one (a child forked by user code), end it here, before `what` is written."""
    pid = _pid
    if pid is None or _running == 0 or os.getpid() == pid:
        return
    me = os.getpid()
    where = f" of snapshot {snapshot_dir}" if snapshot_dir is not None else ""
    note = f"{me}\t{snapshot_dir or ''}\t{what}"[:500] + "\n"
    if _pipe is not None and stat.S_ISFIFO(_fstat_mode(_pipe[1])):  # never into a file that took a closed pipe's number
        with contextlib.suppress(OSError):
            os.write(_pipe[1], note.encode())  # one write below PIPE_BUF: atomic
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), (f"genrun: process {me}, forked by user code from the executing process {pid}, reached genrun's "
                                       f"writing ({what}{where}: it returned, raised or called the recorder); it exits without "
                                       "touching the snapshot. A forked child must end with os._exit().\n").encode())
    os._exit(CHILD_EXIT)


def forked_returns(snapshot_dir: Path) -> list[str]:
    """The children that returned into genrun while `snapshot_dir` was executed: `pid N (where)` each."""
    with _lock:
        if _pipe is not None and _pid == os.getpid():
            _drain(_pipe[0])
        mine = [n for n in _notes if n.split("\t")[1] in ("", str(snapshot_dir))]
        _notes[:] = [n for n in _notes if n not in mine]
    return [f"pid {pid} ({what})" for pid, _, what in (n.split("\t", 2) for n in mine)]


def _drain(fd: int) -> None:
    if not stat.S_ISFIFO(_fstat_mode(fd)):  # user code closed the pipe (its number may be a file of its own now)
        return
    chunks = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                break
            raise
        if not chunk:
            break
        chunks += chunk
    _notes.extend(line for line in chunks.decode(errors="replace").splitlines() if line.count("\t") >= 2)


def _fstat_mode(fd: int) -> int:
    try:
        return os.fstat(fd).st_mode
    except OSError:
        return 0
