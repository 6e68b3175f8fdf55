"""`lineage.json` (frozen at plan time by `genrun rerun`) and `determinism.json` (written at execution)."""

from typing import Any, Literal

from ._base import Strict

ChangeAction = Literal["set", "unset", "suppress_eos"]


class RequestChange(Strict):
    """One change applied to the parent's frozen request."""

    key: str
    """Dotted request key, e.g. `generation.max_new_tokens`."""
    action: ChangeAction
    """`set` (from `--set`), `unset` (from `--unset`) or `suppress_eos` (from `--suppress-eos`)."""
    parent_value: Any = None
    """The value in the parent's request; `None` with `parent_absent` when it had none."""
    parent_absent: bool = False
    """The parent's request did not have this key."""
    child_value: Any = None
    """The value in the child's request; `None` with `child_absent` after `unset`."""
    child_absent: bool = False
    """The child's request does not have this key."""


class Lineage(Strict):
    """Where a rerun snapshot comes from: its parent, the exact changes, and why."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    parent_id: str
    """The parent snapshot's directory name."""
    parent_path: str
    """Absolute path of the parent snapshot when the child was planned."""
    parent_snapshot_digest: str
    """sha256 of the parent's `manifest-sha256.txt` (verified before rerunning)."""
    parent_plan_digest: str
    """sha256 of the parent's `frozen-sha256.txt`."""
    changes: tuple[RequestChange, ...]
    """Changes to the parent's request, in the order given; empty for a plain reproduction."""
    note: str | None = None
    """Why the rerun was made (`--note`)."""
    allow_changed: bool = False
    """`--allow-changed` was given."""
    changed_since_parent: tuple[str, ...] = ()
    """Model or code differences found against the parent's identities and allowed by `--allow-changed`."""
    model_path_rewritten: bool = False
    """The parent's relative `[model] path` could not be re-resolved and was replaced by its resolved absolute path."""


class Determinism(Strict):
    """`determinism.json`: what bit-for-bit reproduction of this run depends on, as it was during generation."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    seed: int
    """The request's seed, given to `torch.manual_seed` before generation."""
    strict_requested: bool
    """`[determinism] strict = true` was set in the request."""
    deterministic_algorithms: bool | None
    """`torch.are_deterministic_algorithms_enabled()` during the run; `None` when torch could not say or the backend does not
    use torch (its runtime claims no library setting)."""
    deterministic_warn_only: bool | None
    """`torch.is_deterministic_algorithms_warn_only_enabled()` during the run."""
    sampling: bool | None
    """`do_sample` as generate used it (effective config); `None` when no generation config was recorded."""
    device: str
    """Device the run was placed on (`cpu`, `cuda:0`, ...)."""
    torch_threads: int | None
    """`torch.get_num_threads()` (intra-op threads)."""
    torch_interop_threads: int | None
    """`torch.get_num_interop_threads()`."""
    cudnn_deterministic: bool | None
    """`torch.backends.cudnn.deterministic`; `None` when CUDA is not used."""
    cudnn_benchmark: bool | None
    """`torch.backends.cudnn.benchmark`; `None` when CUDA is not used."""
    cuda_matmul_allow_tf32: bool | None
    """`torch.backends.cuda.matmul.allow_tf32`; `None` when CUDA is not used."""
    cublas_workspace_config: str | None
    """`CUBLAS_WORKSPACE_CONFIG` during the run (cuBLAS needs it for determinism); `None` when unset or CUDA is not used."""
