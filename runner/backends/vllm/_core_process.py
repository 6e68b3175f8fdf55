"""The engine-core process vLLM spawns: it dies with the process that started it, and its output goes to the run log.

With vLLM's multiprocessing (the default) the engine core is a spawned process running `EngineCoreProc.run_engine_core`.
Left alone it writes on the terminal it inherited (file descriptors 1 and 2: vLLM's log lines, the weight-loading bar,
warnings issued while it imports) and it outlives a parent killed by SIGKILL, holding the memory (on a GPU, the card's).

While genrun starts an engine (`starting_engine_core`), vLLM's target is a `CoreTarget`. The spawned process unpickles its
target before the engine's configuration, so before it imports vLLM; unpickling a `CoreTarget` points fds 1 and 2 at two
files (`CoreOutput`, read by genrun into the run log of the execution in progress) and starts a thread that kills the
process once its parent is gone. Then vLLM's own target runs. The core's workers inherit both descriptors and end with
the core (vLLM's death pipe).

Why a polling thread and not `prctl(PR_SET_PDEATHSIG)`: that signal fires when the *thread* that started the child
exits, not the process, and an engine may be started on a thread that ends before the engine does.
"""

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

PARENT_POLL_S = 0.5
"""How often the core checks that its parent lives (seconds): at most this long an orphan, plus the kernel's kill."""
OUTPUT_POLL_S = 0.2
"""How often genrun reads what the core wrote (seconds): a line reaches the run log at most this late."""
Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")
SOURCE = "vllm"
"""The run log's `source` for the core's lines (vLLM's processes; a line's own text says which, e.g. `(EngineCore pid=…)`)."""


class CoreOutput:
    """Two files the engine core (and its workers) write instead of the terminal, followed into the run log."""

    def __init__(self, add_line: Callable[[Stream, str, str], None]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="genrun-vllm-core-"))
        self.paths = {stream: self.directory / stream for stream in STREAMS}
        for path in self.paths.values():
            path.touch()
        self._add_line = add_line
        """`(stream, source, text)` into the run log in progress (`run_log.add_line_from_another_process`)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="genrun-vllm-core-output", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Read what is left (the core's shutdown lines: call this after stopping it), then remove the files."""
        self._stop.set()
        self._thread.join()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _follow(self) -> None:
        handles = {stream: path.open("rb") for stream, path in self.paths.items()}
        partial = dict.fromkeys(STREAMS, b"")
        try:
            while True:
                stopping = self._stop.wait(OUTPUT_POLL_S)
                for stream, handle in handles.items():
                    *lines, partial[stream] = (partial[stream] + handle.read()).split(b"\n")
                    for line in lines:
                        self._add_line(stream, SOURCE, line.decode("utf-8", errors="replace"))
                if stopping:
                    for stream, rest in partial.items():  # a bar left without its newline
                        if rest:
                            self._add_line(stream, SOURCE, rest.decode("utf-8", errors="replace"))
                    return
        finally:
            for handle in handles.values():
                handle.close()


class CoreTarget:
    """What the spawned engine-core process runs: its setup (`_set_up`), then vLLM's `run_engine_core`."""

    def __init__(self, parent_pid: int, output: dict[Stream, str] | None, original: Callable[..., Any] | None = None) -> None:
        self.parent_pid = parent_pid
        self.output = output
        """`{"stdout": path, "stderr": path}`, or `None` to leave the descriptors as inherited."""
        self._original = original
        """vLLM's target (set in the process that started the engine; a forked core calls it from there)."""
        self._set_up_done = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled_in_core, (self.parent_pid, self.output))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._set_up_done:  # a forked core: nothing was unpickled
            self._set_up()
        run = self._original
        if run is None:
            from vllm.v1.engine.core import EngineCoreProc

            run = EngineCoreProc.run_engine_core
        return run(*args, **kwargs)

    def _set_up(self) -> None:
        self._set_up_done = True
        if self.output is not None:
            for fd, stream in zip((1, 2), STREAMS):
                target = os.open(self.output[stream], os.O_WRONLY | os.O_APPEND)
                os.dup2(target, fd)
                os.close(target)
        threading.Thread(target=_die_with_parent, args=(self.parent_pid,), name="genrun-die-with-parent", daemon=True).start()


def _unpickled_in_core(parent_pid: int, output: dict[Stream, str] | None) -> CoreTarget:
    """Runs in the spawned core as it unpickles its target: the setup happens before vLLM is imported there."""
    target = CoreTarget(parent_pid, output)
    target._set_up()
    return target


def _die_with_parent(parent_pid: int) -> None:
    """Kill this process once `parent_pid` is no longer its parent (it died: the process was handed to another reaper)."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def starting_engine_core(output: CoreOutput | None) -> Iterator[None]:
    """While `LLM(...)` starts: any engine core it spawns runs a `CoreTarget` (tied to this process, its output in
    `output`'s files). vLLM's own target is put back afterwards."""
    from vllm.v1.engine.core import EngineCoreProc

    original = EngineCoreProc.__dict__["run_engine_core"]
    paths = {stream: str(path) for stream, path in output.paths.items()} if output is not None else None
    EngineCoreProc.run_engine_core = CoreTarget(os.getpid(), paths, original.__func__)
    try:
        yield
    finally:
        EngineCoreProc.run_engine_core = original


def start_resource_tracker(output: CoreOutput) -> None:
    """Start multiprocessing's resource tracker with its stderr on the core's file, unless it runs already.

    The first spawned process starts the tracker, which inherits this process's stderr and serves every process spawned
    from here (the core and its workers register their shared memory with it). Its only words come at exit, after any
    run log has closed: that it cleaned up shared memory vLLM's processes left behind. They would land on the terminal;
    started here, they go to a file nobody reads any more. Descriptor 2 is pointed at the file only while the tracker is
    being spawned."""
    from multiprocessing import resource_tracker

    saved, target = os.dup(2), os.open(output.paths["stderr"], os.O_WRONLY | os.O_APPEND)
    try:
        os.dup2(target, 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def core_runs_in_a_process() -> bool:
    """vLLM's `VLLM_ENABLE_V1_MULTIPROCESSING` (default on): the engine core is a process of its own."""
    from vllm import envs

    return bool(envs.VLLM_ENABLE_V1_MULTIPROCESSING)
