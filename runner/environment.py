"""`environment.json`: the interpreter, packages, host, CUDA devices, git state and behaviour-changing env vars.

The packages and CUDA devices are the backend runtime's (`genrun.runner.runtime`): a torch backend records torch's
view, a backend that names no library records none, and nothing here imports torch. Every probe degrades to `None`
(not installed, not a repository, no /proc, no GPU) instead of failing the plan: an unknown is recorded as unknown.
"""

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from genrun.schemas import CpuInfo, Environment, GitState
from genrun.schemas.digests import sha256_bytes

from . import __version__
from .runtime import NEUTRAL_RUNTIME, Runtime

GENRUN_PACKAGES = ("pydantic", "orjson", "rich")
"""genrun's own dependencies that shape the artifacts, recorded after the backend runtime's `packages`."""

ENV_PREFIXES = ("CUDA_", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "PYTORCH_", "TORCH_", "TOKENIZERS_", "GENRUN_")
"""Environment variables with these prefixes change behaviour and are recorded."""

# Names that hold credentials (HF_TOKEN, HF_API_KEY, ...). A snapshot is meant to be shared, so
# these are never recorded, not even masked. "TOKENIZERS" is removed before the check so that
# TOKENIZERS_PARALLELISM (which does change behaviour) is kept.
_CREDENTIAL_MARKS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")

_GIT_TIMEOUT_S = 10.0


def capture_environment(runtime: Runtime = NEUTRAL_RUNTIME, cwd: Path | None = None) -> Environment:
    """Describe the process and machine the plan is made on, as the backend's `runtime` sees it (its packages and CUDA
    devices), and the git state of `cwd` (default the CWD)."""
    return Environment(
        genrun_version=__version__,
        python=sys.version,
        platform=platform.platform(),
        hostname=socket.gethostname(),
        packages=package_versions(tuple(dict.fromkeys((*runtime.packages, *GENRUN_PACKAGES)))),
        cpu=cpu_info(),
        cuda=runtime.cuda_info(),
        git=git_state(Path.cwd() if cwd is None else cwd),
        env_vars=relevant_env_vars(os.environ),
    )


def package_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Installed version of each distribution from its metadata (nothing is imported), `None` when absent."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_info() -> CpuInfo:
    """CPU model from /proc/cpuinfo, logical cores, physical memory from /proc/meminfo."""
    return CpuInfo(model=_cpu_model(), logical_cores=os.cpu_count(), memory_total_bytes=_memory_total_bytes())


def _cpu_model() -> str | None:
    """`model name` of the first processor in /proc/cpuinfo (Linux), else `platform.processor()` or `None`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _memory_total_bytes() -> int | None:
    """`MemTotal` of /proc/meminfo in bytes, `None` when unreadable."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the file says kB and means KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def git_state(cwd: Path) -> GitState:
    """HEAD commit, dirty flag (`git status --porcelain`, untracked files included) and sha256 of `git diff HEAD`.

    Each is `None` when it cannot be known: git missing, not a repository, no commit yet.
    """
    commit_out = _git(cwd, "rev-parse", "--verify", "HEAD")
    status_out = _git(cwd, "status", "--porcelain")
    diff_out = _git(cwd, "diff", "HEAD", "--no-color", "--no-ext-diff", "--binary") if commit_out is not None else None
    return GitState(
        commit=commit_out.decode().strip() if commit_out else None,
        dirty=bool(status_out.strip()) if status_out is not None else None,
        diff_sha256=sha256_bytes(diff_out) if diff_out is not None else None,
    )


def _git(cwd: Path, *args: str) -> bytes | None:
    """stdout of `git <args>` in `cwd`, or `None` when git is missing, fails or hangs."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=_GIT_TIMEOUT_S, check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # a status probe must not take the index lock
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def relevant_env_vars(environ: "os._Environ[str] | dict[str, str]") -> dict[str, str]:
    """The variables named by `ENV_PREFIXES`, minus credentials (see `_CREDENTIAL_MARKS`), sorted by name."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIXES) and not is_credential_name(name)
    }


def is_credential_name(name: str) -> bool:
    """True for names like HF_TOKEN or HF_API_KEY; TOKENIZERS_* is not a credential by itself."""
    upper = name.upper().replace("TOKENIZERS", "")
    return any(mark in upper for mark in _CREDENTIAL_MARKS)
