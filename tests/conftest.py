"""Fixtures shared by every test module: the bundled model, an isolated hash cache, the real CLI (in-process or as a process)."""

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from _lm_helpers import FixtureModels

REPO = Path(__file__).resolve().parent.parent
PROCESS_TIMEOUT_S = 900
"""When a test gives up on a child process: a safety net for a hung child, never a measurement (a loaded
2-core machine can take minutes just to import torch in a fresh process)."""
EXAMPLES = REPO / "examples"
TINY_LM = EXAMPLES / "models" / "tiny-lm"


MODULES_FIRST = (
    "tests/test_sweep_ray.py", "tests/test_fault_injection.py", "tests/test_sweep_faults.py", "tests/test_sweep_resume.py",
    "tests/test_hostile_snapshots.py", "tests/test_generate_paths.py", "tests/test_packaging.py",
)
"""Modules whose tests start whole process trees (Ray actors, sweep workers, fresh interpreters): handed out
first, so the many short modules fill the end of the run instead of one of these running alone."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than this process may use cores (at most 4). A good part of the suite waits on
    processes it started (Ray actors, sweep workers, a signalled run), and the extra worker fills that time."""
    return min(len(os.sched_getaffinity(0)) + 1, 4)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With xdist's default `--dist load`: one test module per work unit (its module fixtures, such as a local
    Ray or a wheel in a venv, are then built once, not once per worker), `MODULES_FIRST` first.

    (xdist's own `loadgroup` would do the grouping, but its marker does not reach pytest >= 9.2's node ids.)
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete (largest modules first) before the first unit goes out
                self.ordered = True
                for module in reversed(MODULES_FIRST):
                    if module in self.workqueue:
                        self.workqueue.move_to_end(module, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def isolated_caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep genrun's caches (hashes, listings) out of ~/.cache and never let transformers reach for the hub."""
    cache = tmp_path_factory.mktemp("genrun-cache")
    os.environ["GENRUN_CACHE_DIR"] = str(cache)
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))  # for any cache that reads XDG alone
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.pop("GENRUN_STORE", None)
    return cache


@pytest.fixture(scope="session")
def tiny_lm() -> Path:
    """The bundled countdown model (examples/models/tiny-lm)."""
    assert (TINY_LM / "config.json").is_file(), "run examples/models/make_tiny_lm.py to build the bundled model"
    return TINY_LM


class CliRun(NamedTuple):
    """What one CLI run left: the fields of `subprocess.CompletedProcess` that tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def fixture_models(tmp_path_factory: pytest.TempPathFactory) -> "FixtureModels":
    """Locally built models (`_lm_helpers.MODEL_BUILDS`), each built once per session and shared by every module."""
    from _lm_helpers import FixtureModels

    return FixtureModels(tmp_path_factory.mktemp("fixture-models"))


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict[str, str | None] | None = None,
            timeout: float = PROCESS_TIMEOUT_S) -> CliRun:
    """Run the real `genrun` CLI in this process: `genrun.runner.cli.main([...])` with stdout/stderr captured.

    `env` entries are applied for the call (a None value unsets the variable) and the whole environment is
    restored afterwards; `cwd` is
    entered and left. An exception escaping `main` (a crash, not a refusal) propagates and fails the
    test. Nothing leaks into later runs: `check_no_leaks` proves the process state is as before.
    `timeout` is accepted for `run_cli_subprocess` symmetry (an in-process run cannot be timed out).
    """
    from genrun.runner.cli import main

    argv = [str(a) for a in args]
    before = process_state()
    saved_env, saved_cwd, saved_modules = dict(os.environ), Path.cwd(), set(sys.modules)
    out, err = _text_capture(), _text_capture()
    for key, value in (env or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.chdir(cwd or REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse usage errors and --version, as the console script would exit
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        _forget_user_modules(saved_modules)
    check_no_leaks(before, process_state(), argv)
    return CliRun(["genrun", *argv], code, _captured(out), _captured(err))


def run_cli_subprocess(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
                       timeout: float = PROCESS_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run the real `genrun` CLI in a subprocess (`python -m genrun.runner.cli`): for tests whose point is a process
    (signals, kills, concurrency, import isolation, end-to-end smoke tests)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "genrun.runner.cli", *map(str, args)],
        cwd=cwd or REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def copy_of_genrun(destination: Path) -> Path:
    """A copy of genrun's source laid out as an install maps it (`genrun.<name>` is the top-level folder `<name>`), for a
    test that edits genrun's own files: a process started with `cwd` there imports genrun from the copy."""
    import shutil

    for package in ("genrun", "runner", "schemas", "analysis"):
        shutil.copytree(REPO / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    for package in ("runner", "schemas", "analysis"):
        (destination / "genrun" / package).symlink_to(Path("..") / package)
    return destination


class ProcessState(NamedTuple):
    """Process-wide state an in-process CLI run could change and leave behind."""

    signal_handlers: dict[int, Any]
    sys_path: list[str]
    generate: Any
    transformers_verbosity: int
    torch_threads: int | None


def process_state() -> ProcessState:
    """Signal handlers, `sys.path`, transformers' `generate` (genrun patches it during a run), its log level, torch threads."""
    handlers = {int(sig): signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    generate = verbosity = threads = None
    if "transformers" in sys.modules:  # only read, never imported here (the analysis tests run without it)
        from transformers import GenerationMixin
        from transformers.utils import logging as hf_logging

        generate, verbosity = GenerationMixin.__dict__.get("generate"), hf_logging.get_verbosity()
    if "torch" in sys.modules:
        threads = sys.modules["torch"].get_num_threads()
    return ProcessState(handlers, list(sys.path), generate, verbosity if verbosity is not None else -1, threads)


def check_no_leaks(before: ProcessState, after: ProcessState, argv: list[str]) -> None:
    """Fail the test when a CLI run left process state changed (a later in-process run would inherit it)."""
    if before.generate is None:  # transformers was first imported by this run: nothing to compare against
        after = after._replace(generate=None, transformers_verbosity=-1)
    if before.torch_threads is None:
        after = after._replace(torch_threads=None)
    if before != after:
        changed = [f for f in ProcessState._fields if getattr(before, f) != getattr(after, f)]
        raise AssertionError(f"genrun {' '.join(argv)} left process state changed: {changed}")


def _text_capture() -> io.TextIOWrapper:
    """A text stream with a `.buffer`, as sys.stdout has (`--json` writes bytes to `sys.stdout.buffer`)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _captured(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")


def _forget_user_modules(known: set[str]) -> None:
    """Drop modules a run imported from outside the installed packages and the repository (users' entry points,
    written to temporary directories): a later test may write a different module under the same name."""
    roots = [REPO, Path(sys.prefix), Path(sys.base_prefix), *(Path(p) for p in sys.path if p and "site-packages" in p)]
    for name in set(sys.modules) - known:
        file = getattr(sys.modules[name], "__file__", None)
        if file and not any(Path(file).is_relative_to(root) for root in roots):
            del sys.modules[name]


def write_request(directory: Path, text: str, name: str = "request.toml") -> Path:
    """Write a request file (TOML or JSON by extension) and return its path."""
    path = directory / name
    path.write_text(text)
    return path


def tiny_request(model: Path, *, prompt: str = "count down from 5 :", generation: str = "max_new_tokens = 16",
                 name: str = "t", top: str = "", tables: str = "") -> str:
    """A TOML request for the bundled model; `generation` is the body of the [generation] table,
    `top` adds top-level keys and `tables` appends whole tables (e.g. "[progress]\nevery_units = 1")."""
    return (
        f'name = "{name}"\nseed = 0\n{top}\n'
        f'[model]\npath = "{model}"\ndtype = "float32"\ndevice = "cpu"\n'
        f'[input]\nprompt = "{prompt}"\n'
        f"[generation]\n{generation}\n{tables}\n"
    )
