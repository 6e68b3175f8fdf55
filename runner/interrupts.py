"""SIGINT/SIGTERM from a command's first line to its last: unwind with an exception, keep the evidence, never lose the seal.

The handler raises `RunInterrupted` **once** (the first signal), so whatever runs unwinds through
every `finally`: planning removes its temporary directory, generate lets the backend record
partial ids and an `interrupted` stop. Later signals (and every signal once `disarm()`ed, i.e.
after generation) are counted, not raised: the short cleanup that writes artifacts and seals the
snapshot must finish (SIGKILL still stops a hung process). Small critical sections (one progress
line) can defer the exception to their end, so a record is never half-counted.

Gates nest: the CLI holds one for the whole command (`genrun.runner.cli.main`), `execute` one from
the first execution file to the seal, the run template (`genrun.runner.run_template`) one more
around load and generate, and it alone disarms, for every backend; an inner gate shares the outer
one's state and handlers, so a signal between two of them is never handled by Python's defaults.

A stop request is sticky: code that catches `BaseException` (a library's import, a user's loop) may swallow the
exception, but not the request. Until the gate disarms, genrun's own checkpoints (`stop_if_requested`: between
planning steps, before execution starts, at a loop's next `emit`/`advance`, after generate returns) raise it again, so the
run ends as it would have: 130/143, the plan removed or the snapshot sealed `interrupted`.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_HANDLED = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
"""Conventional 128 + signal number."""


class RunInterrupted(BaseException):
    """Raised by genrun's SIGINT/SIGTERM handler so generate unwinds through every `finally`.

    A `BaseException` (like `KeyboardInterrupt`) so user code's `except Exception:` does not swallow it.
    """

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        """`SIGINT` or `SIGTERM`."""


class _GateState:
    """Process-wide state: signals are process-wide too."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to a fresh gate, in place (the one module-level instance is shared)."""
        self.installed = False
        self.armed = False
        self.fired: str | None = None
        self.later: list[str] = []
        self.critical_depth = 0
        self.pending = False


_state = _GateState()


def _handler(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _state.fired is not None or not _state.armed:
        _state.later.append(name)
        return
    _state.fired = name
    if _state.critical_depth:
        _state.pending = True
        return
    raise RunInterrupted(name)


@contextlib.contextmanager
def interrupt_gate() -> Iterator[_GateState]:
    """Install the handlers (main thread only; elsewhere signals are left alone) and restore the previous ones.

    Inside an outer gate, nothing is installed: the state is shared, and re-armed unless a signal already fired
    (a process running several snapshots in turn arms each run).
    """
    if threading.current_thread() is not threading.main_thread():
        yield _state
        return
    if _state.installed:
        if _state.fired is None:
            _state.armed = True
        yield _state
        return
    previous = {sig: signal.getsignal(sig) for sig in _HANDLED}
    _state.reset()
    _state.installed = True
    _state.armed = True
    for sig in _HANDLED:
        signal.signal(sig, _handler)
    try:
        yield _state
    finally:
        _state.armed = _state.installed = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def signal_of(exc: BaseException) -> str | None:
    """The signal `exc` stands for: genrun's `RunInterrupted`, or a bare `KeyboardInterrupt` (SIGINT where genrun's
    handler is not installed: not the main thread); `None` for any other exception."""
    if isinstance(exc, RunInterrupted):
        return exc.signal_name
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    return None


def stop_if_requested() -> None:
    """genrun's checkpoint: raise `RunInterrupted` again when a signal arrived while armed and the exception it raised was
    swallowed (a library's or user code's `except BaseException`); nothing inside a critical section (`deferred`), nor
    once disarmed (the evidence is being written). Cheap: a loop's every `emit` calls it."""
    if _state.fired is not None and _state.armed and not _state.critical_depth:
        raise RunInterrupted(_state.fired)


def disarm() -> None:
    """From now on signals are only counted: generation is over and the evidence is being written."""
    _state.armed = False


def first_signal() -> str | None:
    """The signal that interrupted the run, if any."""
    return _state.fired


def later_signals() -> tuple[str, ...]:
    """Signals received after the first one (or after disarming), in order."""
    return tuple(_state.later)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal that arrives inside the block and raise it at the block's end."""
    _state.critical_depth += 1
    try:
        yield
    finally:
        _state.critical_depth -= 1
        if not _state.critical_depth and _state.pending:
            _state.pending = False
            raise RunInterrupted(_state.fired or "SIGINT")
