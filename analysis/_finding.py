"""What a check returns: a typed finding with its status, evidence and what it examined."""

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]

_SEVERITY: dict[Status, int] = {"SKIP": 0, "PASS": 1, "WARN": 2, "FAIL": 3}


class Examined(BaseModel):
    """How many things a check looked at (a check that cannot say this has not reported)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    files: int = 0
    """Files read or hashed."""
    token_ids: int = 0
    """Generated token ids compared."""
    progress_records: int = 0
    """Lines of progress.ndjson examined."""


class Finding(BaseModel):
    """The outcome of one named check."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: str
    """Check name, e.g. `manifest_integrity`."""
    status: Status
    """PASS, WARN, FAIL, or SKIP (the check does not apply or cannot run; `message` says why)."""
    message: str
    """One or a few sentences a person can act on."""
    evidence: dict[str, Any] = {}
    """The facts behind the status (JSON values)."""
    examined: Examined = Examined()
    """What the check looked at."""


def worst(statuses: Iterable[Status]) -> Status:
    """FAIL > WARN > PASS > SKIP; SKIP when there is nothing."""
    return max(statuses, key=_SEVERITY.__getitem__, default="SKIP")


def skip(name: str, reason: str, **evidence: Any) -> Finding:
    """A check that does not apply here; `reason` says why."""
    return Finding(name=name, status="SKIP", message=reason, evidence=evidence)
