"""genrun owns the terminal: what libraries write while a snapshot executes goes to its `run-log.ndjson`.

Every way of executing a snapshot (`genrun run/execute/rerun`, `genrun.execute`/`genrun.run`, sweep workers, local
processes and Ray actors alike) goes through `execute_snapshot`, which captures output for the whole execution
(`captured`). While it does, `sys.stdout`/`sys.stderr` are streams that ask who is writing: the innermost caller
outside the plumbing of `logging`, `warnings` and `rich`:

- genrun itself (its summary, live bar, `--json`): the terminal, as before, never the log;
- a library (code under site-packages/dist-packages or the standard library: transformers' "Loading weights" bar,
  diffusers' notices, warnings and log records the library issues): the log only;
- anything else (the user's entry point or loop, a script's own prints): the terminal and the log (`shown`).

Logging handlers that hold the real streams (transformers and diffusers add theirs at import) are pointed at the
capturing streams for the duration. Nothing here changes what generate does: no logger level, warning filter or
progress-bar setting is touched, and a failed write of the log never reaches the writer (it becomes a note in
`result.json`). Not seen: writes straight to file descriptors 1/2 from C code. Lines other processes write (vLLM's
engine core) come in through `add_line_from_another_process` when their backend reads them back.
"""

import builtins
import contextlib
import logging
import re
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, Literal, TextIO

from genrun.schemas import RunLogLine, layout
from genrun.schemas.run_log import LogStream
from genrun.snapshot_dir import AppendStream, SnapshotDir

from .interrupts import deferred

Writer = Literal["genrun", "library", "user"]

_PLUMBING = frozenset({"logging", "warnings", "rich", "io", "_io", "codecs", "contextlib", "threading"})
"""Modules that only carry someone else's text: the writer is found above them."""
_LIBRARY_DIRS = tuple(sorted({path for key in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (path := sysconfig.get_paths().get(key))}))
_INSTALLED = ("/site-packages/", "/dist-packages/")
LIBRARY_LOGGERS = ("transformers", "diffusers", "accelerate", "huggingface_hub")
"""Libraries that add a stderr handler of their own when imported: it is captured whichever stream it holds."""
_PRINT_DEPTH = 32
"""How far above a write a replaced `print` is looked for."""
HELD_LINES_LIMIT = 10_000
"""Lines kept in memory before the snapshot's log can be written (a model loaded before the run, planning)."""


def writer_of(frame: FrameType | None) -> tuple[Writer, str]:
    """`(kind, top-level module)` of the code that wrote: the first frame outside `_PLUMBING`, above a replacement of
    `print` when the text came through one (Ray's `tqdm_ray` swaps `builtins.print` for its own, process-wide, once a
    Ray progress bar appeared; a replacement may call an earlier one: all of it is the printing, not the writer)."""
    print_code = getattr(builtins.print, "__code__", None)
    probe, depth = frame, 0
    while print_code is not None and probe is not None and depth < _PRINT_DEPTH:
        if probe.f_code is print_code:
            frame = probe.f_back
            break
        probe, depth = probe.f_back, depth + 1
    while frame is not None and _module(frame) in _PLUMBING:
        frame = frame.f_back
    if frame is None:  # only plumbing (a library thread of rich's): nobody's chatter
        return "genrun", "genrun"
    module = _module(frame)
    if module == "genrun":
        return "genrun", module
    filename = frame.f_code.co_filename
    if filename.startswith("<frozen") or any(part in filename for part in _INSTALLED) or filename.startswith(_LIBRARY_DIRS):
        return "library", module
    return "user", module


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__") or "?").split(".")[0]


class RunLog:
    """The lines of one execution: held in memory until `open` names the snapshot, then appended to its log.

    The file is created (never appended to when it exists: an earlier execution's log is evidence) by the first line,
    so a run during which nothing was written has none. Each line is one `os.write` of one JSON line, so a reader never
    sees half a line.
    """

    def __init__(self) -> None:
        self._held: list[tuple[float, LogStream, str, bool, str]] = []
        self._dropped = 0
        self._snapshot: SnapshotDir | None = None
        self._origin = 0.0
        self._stream: AppendStream | None = None
        self.failure: str | None = None
        """Why the log could not be written completely (the run goes on; `result.json` notes it)."""
        self._lock = threading.RLock()
        self.thread = threading.get_ident()
        """The thread that opened the capture: its lines come here first (items of one batching worker run on threads)."""

    def open(self, snapshot: SnapshotDir, origin: float) -> None:
        """From now on lines go to the snapshot's log (created with the first line, in the run's writable `snapshot`); `t`
        counts from `origin` (`time.monotonic()`)."""
        with self._lock:
            self._snapshot = snapshot
            self._origin = origin
            held, self._held = self._held, []
            if self._dropped:
                held.insert(0, (held[0][0] if held else time.monotonic(), "stderr", "genrun", False,
                                f"{self._dropped} earlier lines were not kept (more than {HELD_LINES_LIMIT} before the run began)"))
            for line in held:
                self._append(*line)

    def add(self, stamp: float, stream: LogStream, source: str, shown: bool, text: str) -> None:
        with self._lock:
            if self._snapshot is None:
                if len(self._held) < HELD_LINES_LIMIT:
                    self._held.append((stamp, stream, source, shown, text))
                else:
                    self._dropped += 1
            else:
                self._append(stamp, stream, source, shown, text)

    def take_held(self, other: "RunLog") -> None:
        """Lines `other` (an enclosing capture) holds belong to this run: written before it in the same process."""
        with other._lock:
            self._held, other._held = other._held + self._held, []
            self._dropped, other._dropped = self._dropped + other._dropped, 0

    def held_lines(self) -> list[tuple[str, str]]:
        """`(source, text)` of the library lines held and never written to a snapshot's log (e.g. `genrun plan`'s); the
        user's own lines were shown when written."""
        with self._lock:
            return [(source, text) for _, _, source, shown, text in self._held if not shown]

    def close(self) -> None:
        """No more lines go to the file (later ones are held, and dropped with this object); lines still missing their
        newline (a progress bar left on screen) are written first."""
        with self._lock:
            for stream in _streams:
                stream.flush_partial(self)
            self._snapshot = None
            if self._stream is not None:
                file, self._stream = self._stream, None
                try:
                    file.close()
                except OSError as exc:
                    self.failure = self.failure or f"{layout.RUN_LOG} may be incomplete: closing it failed ({exc.strerror or exc})"

    def _append(self, stamp: float, stream: LogStream, source: str, shown: bool, text: str) -> None:
        if self.failure is not None or self._snapshot is None:
            return
        line = RunLogLine(t=stamp - self._origin, stream=stream, source=source, shown=shown, text=text)
        try:
            if self._stream is None:
                self._stream = self._snapshot.open_stream(layout.RUN_LOG)
            self._stream.write(line.model_dump_json().encode() + b"\n")
        except OSError as exc:  # never into the library's print: the run goes on, result.json says what is missing
            self.failure = f"{layout.RUN_LOG} is incomplete: writing it failed ({exc.strerror or exc}) at t={line.t:.3f} s"


class _CapturingStream:
    """Stands in for `sys.stdout`/`sys.stderr`: each write goes where its writer's kind says (see the module doc)."""

    def __init__(self, target: TextIO, stream: LogStream) -> None:
        self.target = target
        self.stream: LogStream = stream
        self._partial: dict[tuple[str, bool], tuple[float, str]] = {}
        """(source, shown) -> (time of the last write, text since the last newline)."""

    def write(self, text: str) -> int:
        log = _log_of_this_thread()
        if log is None or not isinstance(text, str):
            return self.target.write(text)
        kind, source = writer_of(sys._getframe(1))
        if kind != "library":
            self.target.write(text)
        if kind != "genrun":
            self._collect(log, source, kind == "user", text)
        return len(text)

    def _collect(self, log: RunLog, source: str, shown: bool, text: str) -> None:
        key, now = (source, shown), time.monotonic()
        *lines, rest = (self._partial.get(key, (now, ""))[1] + text).split("\n")
        self._partial[key] = (now, rest)
        for line in lines:
            if (final := _final_state(line)) is not None:
                log.add(now, self.stream, source, shown, final)

    def flush_partial(self, log: RunLog) -> None:
        """Lines still missing their newline (a progress bar left on screen) go to the log as they stand."""
        for (source, shown), (stamp, text) in self._partial.items():
            if (final := _final_state(text)) is not None:
                log.add(stamp, self.stream, source, shown, final)
        self._partial.clear()

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    def __getattr__(self, name: str) -> Any:  # everything else (encoding, buffer, ...) is the real stream's
        if name == "target":  # not set yet (a copy being made): never recurse
            raise AttributeError(name)
        return getattr(self.target, name)


def _final_state(line: str) -> str | None:
    """What a terminal would finally show of `line`: its last non-blank carriage-return segment (a bar's last redraw),
    without terminal control sequences (colours, cursor moves)."""
    return next((part.rstrip() for part in reversed(_CONTROL.sub("", line).split("\r")) if part.strip()), None)


_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""ANSI CSI sequences."""


_logs: list[RunLog] = []
"""The active captures, innermost last: lines go to the innermost one the writing thread opened, else the innermost."""


def _log_of_this_thread() -> "RunLog | None":
    me = threading.get_ident()
    logs = list(_logs)  # another thread may open or close a capture meanwhile
    return next((log for log in reversed(logs) if log.thread == me), logs[-1] if logs else None)


def add_line_from_another_process(stream: LogStream, source: str, text: str) -> None:
    """A line a library's own process wrote (vLLM's engine core), read back by genrun: into the innermost capture in
    progress, never the terminal; dropped when none is (nothing is executing: no snapshot to keep it)."""
    logs = list(_logs)
    if logs and (final := _final_state(text)) is not None:
        logs[-1].add(time.monotonic(), stream, source, False, final)


_streams: list[_CapturingStream] = []
_handlers: list[tuple[logging.StreamHandler[Any], Any]] = []
_install_lock = threading.Lock()


@contextlib.contextmanager
def captured() -> Iterator[RunLog]:
    """Capture library output for one execution (or, enclosing it, for a worker's model load or a CLI command's
    planning: an inner capture takes the lines the outer one holds). Everything is put back when the outermost exits."""
    log = RunLog()
    with deferred(), _install_lock:  # a signal never leaves the streams half swapped
        if (enclosing := _log_of_this_thread()) is not None:
            log.take_held(enclosing)  # this thread's own enclosing capture (another item's thread keeps its lines)
        else:
            _install()
        _logs.append(log)
    try:
        yield log
    finally:
        with deferred():
            log.close()
            with _install_lock:
                _logs.remove(log)
                if not _logs:
                    _uninstall()


def _install() -> None:
    stream: LogStream
    for stream in ("stdout", "stderr"):
        current = getattr(sys, stream)
        wrapper = current if isinstance(current, _CapturingStream) else _CapturingStream(current, stream)
        _streams.append(wrapper)
        setattr(sys, stream, wrapper)
    stdout, stderr = _streams
    standard = {id(sys.__stdout__): stdout, id(stdout.target): stdout, id(sys.__stderr__): stderr, id(stderr.target): stderr}
    for name, logger in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
        for handler in getattr(logger, "handlers", ()):
            if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
                continue
            # a standard stream, or a library's own default handler (added at import, to whatever stderr was then)
            target = standard.get(id(handler.stream)) or (stderr if name in LIBRARY_LOGGERS else None)
            if target is not None and target is not handler.stream:
                _handlers.append((handler, handler.stream))
                handler.stream = target


def _uninstall() -> None:
    for handler, stream in _handlers:
        if isinstance(handler.stream, _CapturingStream):
            handler.stream = stream
    _handlers.clear()
    for wrapper in _streams:
        if getattr(sys, wrapper.stream) is wrapper:
            setattr(sys, wrapper.stream, wrapper.target)
    _streams.clear()
