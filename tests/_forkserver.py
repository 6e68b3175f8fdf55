"""Fork server for the suite: `python tests/_forkserver.py SOCKET` (started by `tests/_forked.py`, never by hand).

Imports genrun's CLI, torch and transformers once, then forks one real process per request: the
child runs `python -m genrun.runner.cli ARGS` exactly as the interpreter would (`runpy` with
`alter_sys`, the request's cwd, environment and standard streams, Python's own signal handlers),
so it has its own pid, receives real signals, holds real locks and can be SIGKILLed. What it
skips is the interpreter start and the ~5 s of imports, which the signal, kill and concurrency
tests otherwise paid per process. Tests about interpreter start itself (import isolation,
packaging, which modules a command imports) keep plain `subprocess`.

After a child exits, the server imports the library modules that child imported (torch,
transformers, diffusers, ... never Ray or a user's own files), so later children start warm.

Protocol, one connection per child: the client sends an 8-byte length, a JSON request
`{"argv", "cwd", "env", "new_session", "limits"}` and, as SCM_RIGHTS, its three standard-stream
descriptors; the server answers `{"pid": N}` then, once the child has been reaped,
`{"status": WAIT_STATUS}` (one JSON line each) and closes the connection.
"""

import importlib
import importlib.util
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import traceback
from pathlib import Path

WARM_DENIED = frozenset({"ray", "grpc", "playwright", "mlflow", "_pytest", "pytest", "__main__", "__mp_main__"})
"""Top-level modules never imported into the server: they start threads or services that forking must not copy."""
CHILD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(data) < 8:
        raise ConnectionError("short request")
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    return json.loads(body), list(fds)


def _standard_streams(environ: dict[str, str]) -> None:
    """Make sys.stdin/stdout/stderr as a fresh interpreter would over the new descriptors 0, 1, 2."""
    unbuffered = bool(environ.get("PYTHONUNBUFFERED"))
    for fd, name, errors in ((0, "stdin", "strict"), (1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(buffered, encoding="utf-8", errors=errors,
                                  line_buffering=fd == 2 or raw.isatty(), write_through=unbuffered and fd != 0)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _limit(limits: dict) -> None:
    """`setrlimit` for the child: CPU seconds, and address space as headroom above what the server's imports
    already map (a fresh interpreter's limit would count its own imports the same way)."""
    import resource

    if "cpu_seconds" in limits:
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"]))
    if "address_space_headroom" in limits:
        mapped = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
        ceiling = mapped + limits["address_space_headroom"]
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))


def _run_child(request: dict, fds: list[int], modules_out: str) -> int:
    if request.get("new_session"):
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _standard_streams(request["env"])
    _limit(request.get("limits") or {})
    sys.argv = ["-m", *request["argv"]]
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    code = 0
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_SIGNALS)
    except KeyboardInterrupt:  # SIGINT before genrun's code ran: as an interpreter still starting, no traceback
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    try:
        runpy.run_module("genrun.runner.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # as the interpreter does: the traceback, then death by SIGINT
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        with open(modules_out, "w") as f:
            json.dump(sorted(sys.modules), f)
    except OSError:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def warm_imports(modules_file: Path) -> None:
    """Import what a finished child imported (the JSON list of module names in `modules_file`, removed after), so the
    next children start with it loaded. Also used by `_fault_server.py`."""
    try:
        names = json.loads(modules_file.read_text())
    except (OSError, ValueError):
        return
    finally:
        modules_file.unlink(missing_ok=True)
    roots = [Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parent.parent]
    for name in names:
        if name in sys.modules or name.split(".")[0] in WARM_DENIED or name.startswith("__"):
            continue
        spec = _find(name)
        origin = getattr(spec, "origin", None)
        if not origin or not any(Path(origin).resolve().is_relative_to(root) for root in roots):
            continue  # a user's entry point written to a temporary directory: only its child imports it
        try:
            importlib.import_module(name)
        except Exception:  # a module that imports only in its own context
            pass


def _find(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None


def serve(path: str) -> None:
    import genrun.runner.cli  # noqa: F401
    import genrun.runner.backends.transformers.backend  # noqa: F401  (torch, transformers, genrun's instrumentation)

    scratch = Path(path).parent / "modules"  # beside the socket: the client removes the folder when it stops the server
    scratch.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, tuple[socket.socket, Path]] = {}
    finished: list[Path] = []  # module lists of exited children, imported once no child is running
    parent = os.getppid()
    print("ready", flush=True)
    while os.getppid() == parent:  # the pytest process that started this server died: so does the server
        for key, _ in selector.select(timeout=0.02):
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (ConnectionError, ValueError, OSError) as exc:
                print(f"bad request: {exc}", file=sys.stderr, flush=True)
                conn.close()
                continue
            modules_out = scratch / f"{len(children)}-{os.urandom(4).hex()}.json"
            sys.stdout.flush()
            sys.stderr.flush()
            # a signal sent the moment the pid is known must meet the child's own handlers, not the server's
            signal.pthread_sigmask(signal.SIG_BLOCK, CHILD_SIGNALS)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    selector.close()
                    listener.close()
                    for other, _ in children.values():
                        other.close()
                    conn.close()
                    code = _run_child(request, fds, str(modules_out))
                finally:
                    os._exit(code & 0xFF if code >= 0 else 1)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_SIGNALS)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = (conn, modules_out)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn, modules_out = children.pop(pid)
            try:
                conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            except OSError:  # the test stopped listening; the child is reaped all the same
                pass
            conn.close()
            finished.append(modules_out)
        if finished and not children:
            for modules_out in finished:
                warm_imports(modules_out)
            finished.clear()


if __name__ == "__main__":
    serve(sys.argv[1])
