"""`genrun` as a real process without paying the interpreter start: children of `tests/_forkserver.py`.

`spawn_cli(...)` returns a `ForkedProcess`, which tests use as they would a `subprocess.Popen` of
`python -m genrun.runner.cli ...`: `pid` (signal it, read it from a lock file), `stdout`/`stderr`
pipes, `poll`, `wait`, `communicate`, `send_signal`, `kill`, `returncode` (negative for a signal).
The child is forked from a server that has already imported genrun, torch and transformers; it is
not this process's child, so only these methods (not `os.waitpid`) see its exit.

Use it where the process is the point (signals, kills, concurrency, locks, a full disk) but the
interpreter start is not. Settings an interpreter reads only when it starts cannot be given per
child, so `spawn_cli` refuses them (`INTERPRETER_START`): such tests use `subprocess` directly.

One server per pytest process, started at the first call and stopped when the process exits.
"""

import atexit
import io
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
SERVER = Path(__file__).with_name("_forkserver.py")
INTERPRETER_START = frozenset({
    "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONWARNINGS",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_VERBOSITY", "TORCH_HOME",
})
"""Read once by the interpreter or by a library at import: a forked child would silently keep the server's value."""
SERVER_START_TIMEOUT_S = 900  # a safety net for a hung server, never a measurement (a loaded machine imports slowly)

PIPE, DEVNULL = subprocess.PIPE, subprocess.DEVNULL


class _Server:
    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="gr-fs-", dir="/tmp")  # AF_UNIX paths must stay under 108 bytes
        self.path = os.path.join(self._dir, "s")
        self.env = dict(os.environ)
        self._log = open(os.path.join(self._dir, "log"), "w+")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), self.path], cwd=REPO, env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], SERVER_START_TIMEOUT_S)
        if not ready or self.proc.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(f"the fork server did not start:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)  # the socket, the log and the server's scratch folder


_server: _Server | None = None


def _the_server() -> _Server:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
        atexit.register(_server.stop)
    return _server


class ForkedProcess:
    """A `subprocess.Popen`-like handle on one forked `genrun` process."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int,
                 stdin: IO[Any] | None, stdout: IO[Any] | None, stderr: IO[Any] | None) -> None:
        self.args, self.pid, self._conn = args, pid, conn
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self._buffer = b""

    def _read_status(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return False
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the fork server went away while {self.args} ran:\n{_the_server().log()}")
            self._buffer += chunk
        status = json.loads(self._buffer.split(b"\n", 1)[0])["status"]
        self.returncode = os.waitstatus_to_exitcode(status)
        self._conn.close()
        return True

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def communicate(self, input: str | bytes | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Like Popen.communicate: feed stdin, read both pipes to their end, wait for the exit."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
            self.stdin = None
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = {s: [] for s in (self.stdout, self.stderr) if s is not None}
        open_streams = {s.fileno(): s for s in streams}
        while open_streams:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            ready, _, _ = select.select(list(open_streams), [], [], left)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    streams[open_streams[fd]].append(chunk)
                else:
                    del open_streams[fd]
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        results = []
        for stream in (self.stdout, self.stderr):
            if stream is None:
                results.append(None)
                continue
            data = b"".join(streams[stream])
            # text mode decodes with universal newlines, as Popen does
            results.append(data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
                           if isinstance(stream, io.TextIOBase) else data)
            stream.close()
        return results[0], results[1]

    def __enter__(self) -> "ForkedProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.returncode is None:
            self.kill()
            self.wait()


def _stream(spec: Any, default_fd: int, reading: bool) -> tuple[int, int | None]:
    """(descriptor the child gets, our end of a new pipe or None)."""
    if spec == PIPE:
        read_end, write_end = os.pipe()
        return (read_end, write_end) if reading else (write_end, read_end)
    if spec == DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if spec is None:
        return os.dup(default_fd), None
    if isinstance(spec, int):
        return os.dup(spec), None
    return os.dup(spec.fileno()), None


def spawn_cli(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
              stdin: Any = DEVNULL, stdout: Any = PIPE, stderr: Any = PIPE, text: bool = True,
              start_new_session: bool = False, limits: dict[str, int] | None = None) -> ForkedProcess:
    """Start `python -m genrun.runner.cli ARGS` as a forked real process (see the module docstring).

    `limits`: `setrlimit` in the child before genrun runs: `cpu_seconds`, and `address_space_headroom` (bytes the
    child may map beyond what it holds at the fork, i.e. beyond the imports a fresh interpreter would also count).
    """
    server = _the_server()
    full_env = {**os.environ, **(env or {})}
    changed = sorted(k for k in INTERPRETER_START if full_env.get(k) != server.env.get(k))
    if changed:
        raise ValueError(f"spawn_cli cannot give a forked child its own {changed} (read at interpreter start): "
                         "use subprocess for this test")
    argv = [str(a) for a in args]
    child_fds, ours = [], []
    for spec, default_fd, reading in ((stdin, 0, True), (stdout, 1, False), (stderr, 2, False)):
        if spec == subprocess.STDOUT:  # stderr into whatever stdout is
            child_fds.append(os.dup(child_fds[1]))
            ours.append(None)
            continue
        child_fd, our_end = _stream(spec, default_fd, reading)
        child_fds.append(child_fd)
        ours.append(our_end)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server.path)
        body = json.dumps({"argv": argv, "cwd": str(cwd or REPO), "env": full_env,
                           "new_session": start_new_session, "limits": limits or {}}).encode()
        payload = len(body).to_bytes(8, "big") + body
        sent = socket.send_fds(conn, [payload], child_fds)
        if sent < len(payload):
            conn.sendall(payload[sent:])
    finally:
        for fd in child_fds:
            os.close(fd)
    reply = b""
    while b"\n" not in reply:
        chunk = conn.recv(4096)
        if not chunk:
            raise RuntimeError(f"the fork server refused {argv}:\n{server.log()}")
        reply += chunk
    line, rest = reply.split(b"\n", 1)
    pid = json.loads(line)["pid"]

    def wrap(fd: int | None, mode: str) -> IO[Any] | None:
        if fd is None:
            return None
        return open(fd, mode + ("" if text else "b"), **({"encoding": "utf-8", "errors": "strict"} if text else {}))

    process = ForkedProcess(["genrun", *argv], conn, pid, wrap(ours[0], "w"), wrap(ours[1], "r"), wrap(ours[2], "r"))
    process._buffer = rest
    return process


def run_cli_forked(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None, limits: dict[str, int] | None = None) -> subprocess.CompletedProcess[str]:
    """`spawn_cli` to its end: a `CompletedProcess` as `subprocess.run(..., capture_output=True, text=True)` gives."""
    process = spawn_cli(*args, cwd=cwd, env=env, limits=limits)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
