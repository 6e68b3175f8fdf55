"""Fault-injection runner: `python tests/_fault_server.py JOBS.json` -> one JSON result per job on stdout.

Imports genrun's CLI (torch, transformers) once, then forks one real process per job: each child
runs `genrun.runner.cli.main(argv)` with a `sys.addaudithook` hook that counts the filesystem calls
Python audits (`open`, reported as `open-write` when it may create or change a file, `os.rename`/`os.replace`, `os.chmod`, `os.mkdir`, `os.remove`, ...) whose
path lies inside the store, and sends itself the job's signal just before call number `at`
(raised inside the hook, so the call itself never happens). A job with `at = null` records the
calls instead, which is how the test enumerates them. A job with `at_path` instead sends the signal just
before the first call, inside the store or not, whose path contains it (planning reads the request, the model's
files, the hash cache and `/proc/meminfo` before it touches the store). Used only by tests: genrun has no hook.

Calls on a descriptor (`write`, `fsync`, `fchmod`) are not audited by Python and are not points;
the `open`/`rename` around each of them are.
"""

import contextlib
import json
import os
import re
import signal
import sys
import traceback
from pathlib import Path

from _forkserver import warm_imports
from genrun.schemas import layout

FS_EVENTS = frozenset({
    "open", "os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate", "os.link", "os.symlink",
    "tempfile.mkstemp", "tempfile.mkdtemp", "shutil.rmtree", "os.scandir", "os.listdir",
})
ATOMIC_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")
"""The name `genrun.runner._io` gives an atomic write's temporary file (`.<name>.<8 hex>.tmp`)."""
APPEND_STREAMS = frozenset({layout.PROGRESS, layout.RUN_LOG, layout.STAGE_PROGRESS, layout.SWEEP_PROGRESS})
"""Append-only files genrun opens by name relative to the snapshot's descriptor (`SnapshotDir.open_stream`)."""
DIR_FD_ARG = {"os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.mkdir": 2, "os.chmod": 2, "os.link": 2, "os.symlink": 2}
"""Where each audited call carries its `dir_fd` (Python's audit events table); `open` carries none."""


def _noop() -> None:
    """A Python-level call: the interpreter runs pending signal handlers at its start."""


def _child(job: dict) -> int:
    store = os.path.abspath(job["store"]) + os.sep
    at, at_path, sig = job.get("at"), job.get("at_path"), job.get("signal")
    seen: list[list[str]] = []
    fired = [False]

    def stop() -> None:
        fired[0] = True
        os.kill(os.getpid(), getattr(signal, sig))
        for _ in range(3):  # let the handler run here, before the audited call
            _noop()

    last_folder: list[str | None] = [None]
    held_folder: list[str | None] = [None]
    """The last snapshot folder inside the store opened by its path (`SnapshotDir.held_open`)."""

    def where(path: object, dir_fd: object) -> str:
        """The absolute path a call reaches: genrun writes through folder descriptors (`os.open(name, dir_fd=...)`),
        so a relative name is resolved against the descriptor when the audit event carries it, else against the last
        folder inside the store that was opened as a directory when the name is an atomic write's temporary file (the
        `open` event carries no `dir_fd`; any other relative name is a library's, relative to the working directory)."""
        name = os.fsdecode(path)  # type: ignore[arg-type]
        if os.path.isabs(name):
            return os.path.abspath(name)
        if name == "." and held_folder[0] is not None:  # a held snapshot's descriptor opened again (`open_directory`)
            return held_folder[0]
        if isinstance(dir_fd, int) and dir_fd >= 0:
            with contextlib.suppress(OSError):
                return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        if last_folder[0] is not None and (ATOMIC_TEMPORARY.fullmatch(name) or name in APPEND_STREAMS):  # genrun's own, in the folder it opened
            return os.path.join(last_folder[0], name)
        return os.path.abspath(name)

    def hook(event: str, args: tuple) -> None:
        if event not in FS_EVENTS or not args:
            return
        dir_fd = args[DIR_FD_ARG[event]] if event in DIR_FD_ARG and len(args) > DIR_FD_ARG[event] else None
        paths = [where(a, dir_fd) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
        flags = args[2] if event == "open" and len(args) > 2 and isinstance(args[2], int) else 0
        if flags & os.O_DIRECTORY and paths:
            last_folder[0] = paths[0]  # any folder, inside the store or not (the hash cache writes the same way)
            if isinstance(args[0], (str, os.PathLike)) and os.path.isabs(os.fspath(args[0])) and paths[0].startswith(store):
                held_folder[0] = paths[0]  # a snapshot opened by its path: what its held descriptor's "." names
        if at_path is not None and not fired[0] and any(at_path in p for p in paths):
            stop()
        inside = [p for p in paths if p.startswith(store)]
        if not inside:
            return
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            event = "open-write"  # creates or changes a file, unlike the many reads
        seen.append([event, os.path.relpath(inside[0], store)])
        if at is not None and len(seen) == at:
            stop()

    sys.addaudithook(hook)
    from genrun.runner.cli import main

    try:
        code = main(job["argv"])
    except BaseException:  # the test asserts there is none: print it where the test reads stderr
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if job.get("calls_out"):
        with open(job["calls_out"], "w") as f:
            json.dump(seen, f)
    if job.get("modules_out"):
        with open(job["modules_out"], "w") as f:
            json.dump(sorted(sys.modules), f)
    return code


def run_job(job: dict) -> dict:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(err, 2)
            code = _child(job)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {"returncode": os.waitstatus_to_exitcode(status)}


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    import genrun.runner.cli  # noqa: F401  (imported once, before forking: each child starts warm)
    import torch

    torch.set_num_threads(1)  # before any op: forked children must not inherit a started thread pool
    for job in jobs:
        print(json.dumps(run_job(job)), flush=True)
        if job.get("modules_out"):  # what the first run imported, imported here: each later child starts warm
            warm_imports(Path(job["modules_out"]))


if __name__ == "__main__":
    main()
