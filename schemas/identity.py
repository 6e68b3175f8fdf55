"""Frozen identities: `environment.json`, `code.json`, `model.json`."""

from typing import Literal

from ._base import Strict
from ._versioning import Versioned


class CpuInfo(Strict):
    """The host's processor and memory."""

    model: str | None
    """CPU model name from /proc/cpuinfo, `None` when unreadable."""
    logical_cores: int | None
    """`os.cpu_count()`."""
    memory_total_bytes: int | None
    """Physical memory, bytes."""


class CudaDevice(Strict):
    """One visible CUDA device."""

    index: int
    """Device ordinal."""
    name: str
    """Marketing name, e.g. `NVIDIA H200`."""
    capability: tuple[int, int]
    """Compute capability (major, minor)."""
    total_memory_bytes: int
    """Device memory, bytes."""


class CudaInfo(Strict):
    """CUDA as torch sees it."""

    available: bool
    """`torch.cuda.is_available()`."""
    version: str | None
    """CUDA runtime version torch was built with."""
    driver: str | None
    """Driver version when known."""
    devices: tuple[CudaDevice, ...]
    """Visible devices."""


class GitState(Strict):
    """The git checkout genrun was started from, if any."""

    commit: str | None
    """HEAD commit of the working directory, `None` outside a repository."""
    dirty: bool | None
    """Uncommitted changes present."""
    diff_sha256: str | None
    """sha256 of `git diff HEAD` output, so a dirty tree is still identified."""


class Environment(Versioned):
    """`environment.json`: where the plan was made."""

    genrun_version: str
    """Installed genrun version."""
    python: str
    """`sys.version`."""
    platform: str
    """`platform.platform()`."""
    hostname: str
    """Machine name."""
    packages: dict[str, str | None]
    """Versions of the packages that shape generation (those the backend's runtime names, then genrun's own); `None` when
    not installed."""
    cpu: CpuInfo
    """Host processor and memory."""
    cuda: CudaInfo | None
    """CUDA devices as the backend's runtime sees them; `None` when it reports none (a backend that does not use torch) or
    torch is not importable."""
    git: GitState
    """Working-directory git state."""
    env_vars: dict[str, str]
    """Environment variables that change behaviour (CUDA_VISIBLE_DEVICES, HF_*, OMP_*, ...)."""


class FileDigest(Strict):
    """One hashed file."""

    path: str
    """Path relative to the set's root, with `/` separators."""
    size: int
    """Bytes."""
    sha256: str
    """Hex digest of the content."""


class CodeSet(Strict):
    """A set of source files with one aggregate digest."""

    root: str
    """Directory the paths are relative to."""
    files: tuple[FileDigest, ...]
    """Every source file, sorted by path."""
    digest: str
    """sha256 over the sorted `sha256  path` lines."""


class CodeIdentity(Versioned):
    """`code.json`: the code that will run."""

    genrun: CodeSet
    """genrun's own packages (runner, analysis, schemas)."""
    entrypoint: CodeSet | None
    """The user's entry-point/loader modules, when the request names any."""
    remote_code: CodeSet | None
    """The checkpoint's Python files, when any exist."""


HashSource = Literal["hf_blob_name", "computed", "hash_cache"]


class ModelFile(FileDigest):
    """One file of the model directory."""

    hash_source: HashSource
    """How the sha256 was obtained: the HF cache blob name, hashed now, or the local hash cache."""


class ProcessorIdentity(Strict):
    """`[model] processor`: the directory the processor was loaded from instead of the checkpoint's."""

    requested: str
    """`[model] processor` as written in the request."""
    resolved_path: str
    """Absolute directory the files were copied from at plan time."""
    frozen_dir: str
    """Snapshot-relative directory of the frozen copy execution loads (`processor`)."""
    files: tuple[FileDigest, ...]
    """Every file of the directory, sorted by path (each also listed in `frozen-sha256.txt` under `frozen_dir`)."""
    digest: str
    """sha256 over the sorted `sha256  path` lines."""


class ModelIdentity(Versioned):
    """`model.json`: exactly which weights, configs and tokenizer files."""

    source: Literal["local", "hf_cache"]
    """A local directory, or a hub id resolved from the local Hugging Face cache."""
    requested: str
    """`[model] path` as written in the request."""
    resolved_path: str
    """Absolute directory the files were read from."""
    hub_id: str | None
    """`org/name` for hub models."""
    revision: str | None
    """Requested revision for hub models."""
    commit: str | None
    """Resolved hub commit for hub models."""
    files: tuple[ModelFile, ...]
    """Every file of the model directory, sorted by path."""
    weight_bytes: int
    """Total size of the weight files (`*.safetensors`, `*.bin`, ...)."""
    digest: str
    """sha256 over the sorted `sha256  path` lines."""
    processor: ProcessorIdentity | None = None
    """The `[model] processor` directory used instead of the checkpoint's own processor; `None`: the checkpoint's."""
