"""Read-only evaluation of owner sign-offs (`signoffs/*.json` + `.sig`): valid, unsigned or invalid, and why.

A record is judged against the snapshot as it is *now*: its digest must still equal the current
plan digest (`approve`) or snapshot digest (`accept`, `reject`), and when it is signed its
SSH signature must verify with `ssh-keygen -Y verify` against an allowed-signers file, for the
record's `by` as principal and the namespace `<decision>@genrun` (git's SSH signing scheme).
Without any allowed-signers file a signed record is `unverified` ("signed, not verified"), not
invalid: nothing says it is false, only that nobody said whose keys to trust.

A `revoke` record supersedes an earlier record: it binds the sha256 of that record's file, and the
revoked record is then reported as `revoked` (and never opens the approval gate). Revoking only
takes authority away, so a revocation whose binding holds is honoured whether or not it is signed.

This module checks the digests a record binds; it does not re-hash the files a manifest lists.
That a sealed file still matches `manifest-sha256.txt` is verify's manifest check: together
they make any change to a signed snapshot visible.

The signatures themselves (ssh-keygen, allowed-signers files, SSHSIG headers) are `ssh_signatures`'.
Imports only the standard library, pydantic and `schemas` (no torch, transformers or runner).
"""

import hashlib
import os
import subprocess
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from genrun.schemas import layout
from genrun.schemas.digests import plan_digest, snapshot_digest
from genrun.schemas.signoff import Decision, DigestKind, Signoff
from genrun.snapshot_dir import ArtifactError, ArtifactNewer, SnapshotDir, parse_progress_lines

from .ssh_signatures import (
    ALLOWED_SIGNERS_ENV,
    SSH_KEYGEN_TIMEOUT,
    read_signoffs_file,
    signature_matches,
    unusable_signature,
    verify_signature,
)

SignoffState = Literal["valid", "unsigned", "unverified", "revoked", "invalid"]

NAMESPACE_SUFFIX = "@genrun"
SIGNATURE_SUFFIX = ".sig"
DIGEST_KIND_OF: dict[str, DigestKind] = {"approve": "plan", "accept": "snapshot", "reject": "snapshot", "revoke": "record"}
"""Which digest each decision binds: a plan is approved before it runs, results are judged after sealing,
a revocation binds the record it supersedes."""
UNVERIFIED = "signed, not verified (no allowed-signers file)"
DIGEST_SHOWN = 12  # hex characters of a digest in messages


class SignoffStatus(BaseModel):
    """One sign-off record as judged now. Fields from the record are None when it does not parse.

    A model (not a tuple) because the review page and `verify --json` carry it as an object."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    file: str
    """Record file name under `signoffs/`."""
    decision: Decision | None
    by: str | None
    digest_kind: DigestKind | None
    digest: str | None
    at: str | None
    state: SignoffState
    reason: str
    """Why it is invalid or revoked; "no signature" when unsigned; "signed by <principal> (<key>)" when valid."""
    revokes: str | None = None
    """For a `revoke` record: the file name of the record it supersedes."""


def namespace_for(decision: str) -> str:
    """`approve` -> `approve@genrun`: one namespace per decision, so a signature cannot change its meaning."""
    return f"{decision}{NAMESPACE_SUFFIX}"


def default_allowed_signers() -> Path | None:
    """`$GENRUN_ALLOWED_SIGNERS`, then git's `gpg.ssh.allowedSignersFile` (`~` expanded); None when neither is set."""
    value = os.environ.get(ALLOWED_SIGNERS_ENV) or git_config("gpg.ssh.allowedSignersFile")
    return Path(value).expanduser() if value else None


def resolve_allowed_signers(explicit: Path | None) -> Path | None:
    """`--allowed-signers FILE` wins, then `$GENRUN_ALLOWED_SIGNERS`, then git's setting."""
    return Path(explicit).expanduser() if explicit is not None else default_allowed_signers()


def git_config(key: str) -> str | None:
    """`git config --get KEY` as git resolves it from the current directory; None when unset or no git."""
    try:
        done = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True, timeout=SSH_KEYGEN_TIMEOUT)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None


def record_files(snapshot_dir: Path) -> list[Path]:
    """Sign-off records, oldest first (names start with the UTC time); staging files (dot-prefixed) are skipped."""
    directory = Path(snapshot_dir) / layout.SIGNOFFS_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.json") if not p.name.startswith(".") and p.is_file())


def evaluate_signoffs(snapshot_dir: Path, allowed_signers: Path | None) -> list[SignoffStatus]:
    """Judge every record under `signoffs/` against the snapshot's current digests and signatures, oldest first.

    `allowed_signers` None means `$GENRUN_ALLOWED_SIGNERS`, then git's `gpg.ssh.allowedSignersFile`;
    without any, signed records cannot be verified and are reported `unverified`. Records superseded
    by a revocation whose binding holds are reported `revoked`.
    """
    return judge_signoffs(snapshot_dir, resolve_allowed_signers(allowed_signers))


def judge_signoffs(snapshot_dir: Path, trusted: Path | None) -> list[SignoffStatus]:
    """`evaluate_signoffs` with the allowed-signers file already resolved (None: none), for a caller judging many snapshots
    (resolving asks git once per call)."""
    snapshot_dir = Path(snapshot_dir)
    allowed_signers = trusted
    current = CurrentDigests.of(snapshot_dir)
    statuses = [evaluate_record(path, snapshot_dir.name, current, allowed_signers) for path in record_files(snapshot_dir)]
    return apply_revocations(sorted(statuses, key=lambda s: (s.at or "", s.file)))  # names have whole seconds; `at` has microseconds


def apply_revocations(statuses: list[SignoffStatus]) -> list[SignoffStatus]:
    """Mark each record superseded by a not-invalid `revoke` record as `revoked`, naming who revoked it and where."""
    revoked_by = {s.revokes: s for s in statuses if s.decision == "revoke" and s.state != "invalid" and s.revokes}
    judged = []
    for status in statuses:
        revocation = revoked_by.get(status.file)
        if revocation is not None and status.decision != "revoke":
            reason = f"revoked by {revocation.by} in {revocation.file}; before that {status.state}: {status.reason}"
            status = status.model_copy(update={"state": "revoked", "reason": reason})
        judged.append(status)
    return judged


class CurrentDigests(NamedTuple):
    """The snapshot's digests now; None where the file they hash is missing."""

    plan: str | None
    snapshot: str | None

    @classmethod
    def of(cls, snapshot_dir: Path) -> "CurrentDigests":
        plan = plan_digest(snapshot_dir) if (snapshot_dir / layout.FROZEN_MANIFEST).is_file() else None
        sealed = snapshot_digest(snapshot_dir) if (snapshot_dir / layout.MANIFEST).is_file() else None
        return cls(plan=plan, snapshot=sealed)


def evaluate_record(path: Path, snapshot_id: str, current: CurrentDigests, allowed_signers: Path | None) -> SignoffStatus:
    """One record: parse it, check what it binds, then its signature. Every problem found is reported."""
    try:
        record = read_signoffs_file(path, lambda snapshot, name: snapshot.read(name, Signoff))
    except ArtifactNewer as exc:  # a newer genrun's sign-off: not damage, but not readable here either
        return _unparsed(path, f"record was {exc.reason}")
    except ArtifactError as exc:
        return _unparsed(path, f"record does not parse as a Signoff ({exc.reason})")
    problems = binding_problems(record, snapshot_id, current, path.parent)
    sig = path.with_name(path.name + SIGNATURE_SUFFIX)
    if not record.signed:
        if os.path.lexists(sig):
            problems.append(f"record says signed=false but {sig.name} exists")
        state: SignoffState = "invalid" if problems else "unsigned"
        return _status(path, record, state, "; ".join(problems) or "no signature")
    if os.path.lexists(sig) and (unusable := unusable_signature(sig)):  # ssh-keygen would follow a link, block, or read for minutes
        return _status(path, record, "invalid", "; ".join([*problems, f"bad signature: {sig.name} {unusable}"]))
    if allowed_signers is None and sig.is_file():  # nobody named the trusted keys: a warning, not a failure
        if not signature_matches(path, sig, namespace_for(record.decision)):
            problems.append("bad signature: the record does not match its signature (changed after signing, or signed by another file)")
        return _status(path, record, "invalid" if problems else "unverified", "; ".join(problems) or UNVERIFIED)
    verdict = verify_signature(path, sig, record.by, namespace_for(record.decision), allowed_signers)
    if verdict.ok and not problems:
        return _status(path, record, "valid", verdict.message)
    if not verdict.ok:
        problems.append(verdict.message)
    return _status(path, record, "invalid", "; ".join(problems))


def binding_problems(record: Signoff, snapshot_id: str, current: CurrentDigests, signoffs_dir: Path) -> list[str]:
    """What is wrong with the digest a record binds: wrong kind for its decision, other snapshot, changed digest."""
    expected_kind = DIGEST_KIND_OF[record.decision]
    if record.digest_kind != expected_kind:
        return [f"{record.decision} must bind the {expected_kind} digest, record binds the {record.digest_kind} digest"]
    problems = []
    if record.snapshot_id != snapshot_id:
        problems.append(f"record is for snapshot {record.snapshot_id}, not {snapshot_id}")
    if record.decision == "revoke":
        return problems + revocation_problems(record, signoffs_dir)
    now = current.plan if record.digest_kind == "plan" else current.snapshot
    bound = f"record binds {record.digest_kind} digest {short(record.digest)}"
    if now is None:
        missing = layout.FROZEN_MANIFEST if record.digest_kind == "plan" else layout.MANIFEST
        problems.append(f"digest no longer matches: {bound}, but {missing} is missing")
    elif now != record.digest:
        problems.append(f"digest no longer matches: {bound}, current is {short(now)}")
    return problems


def revocation_problems(record: Signoff, signoffs_dir: Path) -> list[str]:
    """A revocation names one existing record (not itself a revocation) and binds that file's current sha256."""
    if not record.revokes or "/" in record.revokes or record.revokes.startswith("."):
        return [f"revoke record names no record file under {layout.SIGNOFFS_DIR}/ (revokes={record.revokes!r})"]
    target = signoffs_dir / record.revokes
    if not target.is_file():
        return [f"revoked record {record.revokes} is missing"]
    try:
        actual = hashlib.sha256(read_signoffs_file(target, SnapshotDir.read_bytes)).hexdigest()
    except ArtifactError as exc:
        return [f"revoked record {record.revokes} cannot be read: {exc.reason}"]
    if actual != record.digest:
        return [f"digest no longer matches: record binds record digest {short(record.digest)} of {record.revokes}, current is {short(actual)}"]
    return []


def execution_started_at(snapshot_dir: Path) -> str | None:
    """When the run began generating (UTC, the `start` event of `progress.ndjson`); None if it never started or cannot
    be read. An approval is checked when execution starts: one signed later did not gate that run."""
    try:
        first_line = SnapshotDir(snapshot_dir).read_bytes(layout.PROGRESS).split(b"\n", 1)[0]
    except ArtifactError:
        return None
    events, _ = parse_progress_lines([first_line])
    return events[0].wall_time if events and events[0].event == "start" else None


def approved_after_start(status: SignoffStatus, started_at: str | None) -> bool:
    """An `approve` record dated after the run started (it is recorded, and may be valid, but it did not gate the run)."""
    if status.decision != "approve" or status.at is None or started_at is None:
        return False
    try:
        return datetime.fromisoformat(status.at) > datetime.fromisoformat(started_at)
    except ValueError:  # a record's `at` is its writer's word: an unreadable one proves nothing either way
        return False


def summarize_signoffs(statuses: Iterable[SignoffStatus]) -> str:
    """One line for `ls`/`verify`: "approve valid (alice@x), accept invalid: digest no longer matches"."""
    parts = []
    for status in statuses:
        label = f"{status.decision or status.file} {status.state}"
        if status.state in ("invalid", "revoked"):
            parts.append(f"{label}: {_short_reason(status.reason)}")
        else:
            parts.append(f"{label} ({status.by})")
    return ", ".join(parts) or "no sign-offs"


def short(digest: str) -> str:
    """First hex characters of a digest, for messages."""
    return f"{digest[:DIGEST_SHOWN]}…" if len(digest) > DIGEST_SHOWN else digest


def _short_reason(reason: str) -> str:
    """The head of each problem: "digest no longer matches: record binds …" -> "digest no longer matches"."""
    return "; ".join(problem.split(":")[0].split(" (")[0] for problem in reason.split("; "))


def _status(path: Path, record: Signoff, state: SignoffState, reason: str) -> SignoffStatus:
    return SignoffStatus(file=path.name, decision=record.decision, by=record.by, digest_kind=record.digest_kind, digest=record.digest,
                         at=record.at, state=state, reason=reason, revokes=record.revokes)


def _unparsed(path: Path, reason: str) -> SignoffStatus:
    return SignoffStatus(file=path.name, decision=None, by=None, digest_kind=None, digest=None, at=None, state="invalid", reason=reason)
