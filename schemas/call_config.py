"""What analysis asks a call-config model that genrun reads typed (`CallConfigArtifact.read_as_model`).

A backend whose call configuration genrun reads with its own model says here how that record is shown and what it
proves about the request, so `report`, `diff` and the checks ask the record, never which backend wrote it. A backend
whose model is not genrun's has its call config read as JSON against the recorded schema and shown as recorded.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ._versioning import Versioned


class CallConfigRecord(Versioned):
    """Base of a typed call-config model. The defaults say nothing beyond the record itself: shown whole under
    `call_config`, and no request values to check (another evidence kind, or none, checks them)."""

    diff_section: ClassVar[str] = "call_config"
    """Its key in `diff` (`<diff_section>.<field>`)."""
    title: ClassVar[str | None] = None
    """Heading of its table in `report` and the HTML page; `None`: `Call config (as made, <file>)`."""
    shown_fields: ClassVar[tuple[str, ...] | None] = None
    """Fields the terminal report shows, those set (`None`: every field); the HTML page shows every field set."""
    call_noun: ClassVar[str] = "the call"
    """What the record is of, in a finding: `[generation] steps = 4 did not reach <call_noun> (...)`."""
    request_fields: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """Where the call as made carries the request's `[generation]` values, each checked against the request by
    `limits_reached_config`: place named in a finding -> the field (a dict) that holds them; empty when it carries none
    (another evidence kind checks them, or none)."""

    def request_problems(self, generation: Mapping[str, Any]) -> list[str]:
        """Further disagreements with the request's `[generation]` that only this record can name (beyond `request_fields`)."""
        return []

    def request_evidence(self) -> dict[str, Any]:
        """The values `limits_reached_config` shows as its evidence."""
        return {}

    def request_summary(self) -> str:
        """What the request's values reached, for a passing finding: `<what>: <the values that matter>`."""
        return self.call_noun

    def planned_units(self) -> int | None:
        """Units the call planned before the first one ran (`None`: it plans none, or it could not be known)."""
        return None
