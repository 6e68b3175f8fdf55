"""`verify`: run every check on a snapshot, read-only, and summarise what was found and examined."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ._context import CheckContext
from ._finding import Examined, Finding
from ._load import Snapshot, read_snapshot
from ._rows import decoded_id_lists
from ._tokenizer import DecoderUnavailable, load_decoder
from .checks import CHECKS, run_checks


class Summary(BaseModel):
    """Counts over all findings."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    checks: int
    """Checks run."""
    passed: int
    warnings: int
    failed: int
    skipped: int
    examined: Examined
    """The most any one check examined, per kind (so an id checked by three checks counts once)."""


class Verification(BaseModel):
    """verify's whole answer: one finding per check and the summary."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    snapshot: str
    """The snapshot directory as given."""
    snapshot_id: str
    """Its directory name."""
    findings: tuple[Finding, ...]
    summary: Summary

    def exit_code(self, strict: bool = False) -> int:
        """1 on any FAIL, and on any WARN when `strict`; else 0."""
        if self.summary.failed or (strict and self.summary.warnings):
            return 1
        return 0


def verify_snapshot(path: str | Path, allowed_signers: Path | None = None) -> Verification:
    """Load the snapshot read-only and run every registered check on it."""
    snap = read_snapshot(path, hash_files=True)
    return verify_loaded(snap, allowed_signers)


def verify_loaded(snap: Snapshot, allowed_signers: Path | None = None) -> Verification:
    """Run the checks on an already-loaded snapshot (hashes needed for the manifest checks)."""
    needs_decoder = snap.token_summary is not None and snap.declares("token_ids")
    decoder = load_decoder(snap.model, decoded_id_lists(snap)) if needs_decoder else DecoderUnavailable("no token ids to decode")
    findings = tuple(run_checks(snap, CheckContext(decoder=decoder, allowed_signers=allowed_signers), CHECKS))
    return Verification(snapshot=str(snap.path), snapshot_id=snap.id, findings=findings, summary=summarise(findings))


def summarise(findings: tuple[Finding, ...]) -> Summary:
    """Status counts, and the largest examined figure per kind."""
    count = lambda status: sum(1 for f in findings if f.status == status)  # noqa: E731
    examined = Examined(
        files=max((f.examined.files for f in findings), default=0),
        token_ids=max((f.examined.token_ids for f in findings), default=0),
        progress_records=max((f.examined.progress_records for f in findings), default=0),
    )
    return Summary(checks=len(findings), passed=count("PASS"), warnings=count("WARN"), failed=count("FAIL"), skipped=count("SKIP"),
                   examined=examined)


def summary_line(summary: Summary) -> str:
    """`N checks: P passed, W warnings, F failed, S skipped; examined X files, Y token ids, Z progress records`."""
    e = summary.examined
    return (f"{summary.checks} checks: {summary.passed} passed, {summary.warnings} warnings, {summary.failed} failed, "
            f"{summary.skipped} skipped; examined {e.files} files, {e.token_ids} token ids, {e.progress_records} progress records")
