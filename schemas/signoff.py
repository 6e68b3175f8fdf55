"""`signoffs/*.json`: an owner's decision bound to a digest."""

from typing import Literal

from ._versioning import Versioned

Decision = Literal["approve", "accept", "reject", "revoke"]
DigestKind = Literal["plan", "snapshot", "record"]


class Signoff(Versioned):
    """One append-only sign-off record (its signature, if any, is `<file>.sig`)."""

    decision: Decision
    """`approve` a plan; `accept` or `reject` a sealed snapshot; `revoke` an earlier record."""
    digest_kind: DigestKind
    """`plan` (sha256 of frozen-sha256.txt), `snapshot` (sha256 of manifest-sha256.txt) or `record` (sha256 of the revoked record file)."""
    digest: str
    """The digest the decision is bound to."""
    snapshot_id: str
    """Snapshot directory name."""
    by: str
    """Who decided (e.g. an e-mail)."""
    at: str
    """UTC ISO-8601 time."""
    note: str | None
    """Free text."""
    accepted_gaps: tuple[str, ...]
    """Known gaps the owner accepts."""
    genrun_version: str
    """genrun version that wrote the record."""
    signed: bool
    """A `<file>.sig` SSH signature was made with namespace `<decision>@genrun`."""
    revokes: str | None = None
    """For `revoke`: the file name (under `signoffs/`) of the record it supersedes; None otherwise."""
