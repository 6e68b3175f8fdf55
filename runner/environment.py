"""`environment.json`: the interpreter, packages, host, CUDA devices, git state and behaviour-changing env vars.

Every probe degrades to `None` (not installed, not a repository, no /proc, no GPU) instead of
failing the plan: an unknown is recorded as unknown.
"""

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from genrun.schemas import CpuInfo, CudaDevice, CudaInfo, Environment, GitState
from genrun.schemas.digests import sha256_bytes

from . import __version__

PACKAGES = (
    "torch", "transformers", "diffusers", "tokenizers", "safetensors", "numpy",
    "pydantic", "orjson", "rich", "huggingface_hub", "accelerate",
)
"""Distributions whose versions shape generation (or the artifacts)."""

ENV_PREFIXES = ("CUDA_", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "PYTORCH_", "TORCH_", "TOKENIZERS_", "GENRUN_")
"""Environment variables with these prefixes change behaviour and are recorded."""

# Names that hold credentials (HF_TOKEN, HF_API_KEY, ...). A snapshot is meant to be shared, so
# these are never recorded, not even masked. "TOKENIZERS" is removed before the check so that
# TOKENIZERS_PARALLELISM (which does change behaviour) is kept.
_CREDENTIAL_MARKS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")

_GIT_TIMEOUT_S = 10.0
_NVIDIA_SMI_TIMEOUT_S = 10.0


def capture_environment(cwd: Path | None = None) -> Environment:
    """Describe the process and machine the plan is made on (git state of `cwd`, default the CWD)."""
    return Environment(
        genrun_version=__version__,
        python=sys.version,
        platform=platform.platform(),
        hostname=socket.gethostname(),
        packages=package_versions(PACKAGES),
        cpu=cpu_info(),
        cuda=cuda_info(),
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


def cuda_info() -> CudaInfo | None:
    """CUDA as torch sees it; `None` when torch is not installed or cannot be imported."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch  # deferred: seconds to import, and only needed here
    except Exception:  # a broken torch install is an environment fact, not a reason to fail the plan
        return None
    available = bool(torch.cuda.is_available())
    devices = []
    if available:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                CudaDevice(index=index, name=props.name, capability=(props.major, props.minor), total_memory_bytes=props.total_memory)
            )
    return CudaInfo(available=available, version=torch.version.cuda, driver=_cuda_driver(torch), devices=tuple(devices))


def _cuda_driver(torch_module: object) -> str | None:
    """Driver version: `torch.cuda.driver_version()` where torch has it, else `nvidia-smi`, else `None`."""
    getter = getattr(getattr(torch_module, "cuda", None), "driver_version", None)
    if callable(getter):
        try:
            return str(getter())
        except Exception:  # not built with CUDA / no driver: fall through to nvidia-smi
            pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first or None


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
