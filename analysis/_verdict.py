"""Typed results of the rerun verdict (`lineage.py`), kept apart so `diff.py` can hold one without an import cycle."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from genrun.schemas import RequestChange

VerdictKind = Literal["reproduced", "diverged", "limit_raised", "eos_suppressed", "incomparable"]
RowOutcome = Literal["identical", "diverged", "same_place_by_eos", "same_place_again", "went_past_stop", "cut_by_child_limit", "went_past_eos",
                     "incomparable"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class RowVerdict(_Model):
    """One row of the parent compared with the same row of the child."""

    index: int
    """Row index."""
    outcome: RowOutcome
    """What the comparison of this row shows."""
    parent_reason: str | None
    """The parent's recorded stop reason."""
    child_reason: str | None
    """The child's recorded stop reason."""
    parent_count: int | None
    """Tokens the parent generated for this row."""
    child_count: int | None
    """Tokens the child generated for this row."""
    first_divergence: int | None
    """First differing token index (where the shorter row ends when one is a prefix of the other); `None` when identical."""
    parent_token_id: int | None
    """The parent's id at `first_divergence` (`None` past its end)."""
    child_token_id: int | None
    """The child's id at `first_divergence` (`None` past its end)."""
    sentence: str
    """The row's verdict in words."""


class EnvironmentDifference(_Model):
    """A recorded fact that determinism depends on and that differs between parent and child."""

    key: str
    """e.g. `determinism.torch_threads`, `packages.torch`, `generation.device`."""
    parent: Any
    """The parent's value (`None` when not recorded)."""
    child: Any
    """The child's value (`None` when not recorded)."""


class LineageVerdict(_Model):
    """What the difference between a child and its parent proves."""

    parent: str
    """Parent snapshot path."""
    child: str
    """Child snapshot path."""
    changes: tuple[RequestChange, ...]
    """The child's changes to the parent's request (`lineage.json`)."""
    kind: VerdictKind
    """`reproduced`, `diverged`, `limit_raised`, `eos_suppressed`, or `incomparable` (an incomplete side)."""
    sentence: str
    """The verdict in one sentence."""
    rows: tuple[RowVerdict, ...]
    """Per-row evidence."""
    environment_differences: tuple[EnvironmentDifference, ...]
    """Determinism-relevant differences between the runs (device, dtype, versions, deterministic flags, threads, seed)."""
    changed_since_parent: tuple[str, ...]
    """Model/code differences the rerun was allowed to run with (`--allow-changed`)."""
