"""Sign-offs: every record under `signoffs/` is still bound to the current digests (and its signature verifies).

The one check that is not pure: judging a signature runs `ssh-keygen -Y verify` (through
`genrun.analysis.signoffs`, imported lazily so verify works where that module or ssh-keygen is absent).

Policy: `invalid` is a FAIL. `unsigned` (bound to the current digest, no signature) is a PASS
with a note, because the binding holds and signing is the owner's choice; but when the user
passed `--allowed-signers`, they asked for signatures, so an unsigned record is a WARN.
A valid `reject` is a WARN: the owner judged the results unusable. A signed record checked
without any allowed-signers file is `unverified`: a WARN ("signed, not verified"), not a FAIL,
since nothing is known to be wrong. A `revoked` record is shown as such (superseded by its
owner), not as invalid.
"""

import os
import re
import stat
from pathlib import Path

from genrun._safe_read import kind_of
from genrun.schemas import layout

from ._context import CheckContext
from ._check_integrity import shorten_list
from ._finding import Examined, Finding, skip
from ._load import Snapshot


def check_signoffs(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Each sign-off record is valid for the snapshot's current plan/snapshot digest."""
    start = next((e for e in (snap.progress.events if snap.progress else ()) if e.event == "start"), None)
    return signoffs_finding(snap.path, ctx.allowed_signers, started_at=start.wall_time if start is not None else None)


def signoffs_finding(path: Path, allowed_signers: Path | None, name: str = "signoffs", *, started_at: str | None = None) -> Finding:
    """The sign-off check for any directory with `signoffs/` (a run snapshot, or a sweep's own records); `started_at`: when
    the run started (an approval dated later is named: it did not gate the run)."""
    directory = path / layout.SIGNOFFS_DIR
    foreign = foreign_entries(directory)
    if foreign:  # a sign-off directory holds records and their signatures; anything else was put there
        return Finding(name=name, status="FAIL", message=f"{layout.SIGNOFFS_DIR}/ holds what no sign-off wrote: {shorten_list(foreign)}",
                       evidence={"foreign": foreign[:100]}, examined=Examined(files=len(foreign)))
    records = sorted(p.name for p in directory.glob("*.json") if not p.name.startswith(".")) if directory.is_dir() else []
    if not records:
        return skip(name, "no sign-offs")
    try:
        from .signoffs import approved_after_start, evaluate_signoffs
    except ImportError as exc:
        return Finding(name=name, status="WARN", message=f"{len(records)} sign-off record(s) present but cannot be evaluated: {exc}",
                       evidence={"records": records}, examined=Examined(files=len(records)))
    statuses = evaluate_signoffs(path, allowed_signers)
    evidence: dict[str, object] = {"records": [s.model_dump() for s in statuses]}
    examined = Examined(files=len(statuses))
    invalid = [s for s in statuses if s.state == "invalid"]
    unsigned = [s for s in statuses if s.state == "unsigned"]
    rejected = [s for s in statuses if s.state == "valid" and s.decision == "reject"]
    unverified = [s for s in statuses if s.state == "unverified"]
    described = ", ".join(_describe(s, late=approved_after_start(s, started_at)) for s in statuses)
    if any(approved_after_start(s, started_at) for s in statuses):
        evidence["run_started_at"] = started_at
    if invalid:
        why = "; ".join(f"{s.file}: {s.reason}" for s in invalid)
        return Finding(name=name, status="FAIL", message=f"{len(invalid)} invalid sign-off(s): {why}", evidence=evidence, examined=examined)
    if rejected:
        return Finding(name=name, status="WARN", message=f"the owner rejected this snapshot: {described}", evidence=evidence, examined=examined)
    if unverified:
        return Finding(name=name, status="WARN", message=f"{len(unverified)} sign-off(s) signed, not verified (no allowed-signers file: "
                       f"pass --allowed-signers FILE or set GENRUN_ALLOWED_SIGNERS): {described}", evidence=evidence, examined=examined)
    if unsigned and allowed_signers is not None:
        return Finding(name=name, status="WARN", message=f"{len(unsigned)} sign-off(s) carry no signature although --allowed-signers was "
                       f"given: {described}", evidence=evidence, examined=examined)
    note = " (unsigned records bind the current digest but prove nothing about who wrote them)" if unsigned else ""
    return Finding(name=name, status="PASS", message=f"{len(statuses)} sign-off(s) bound to the current digests: {described}{note}",
                   evidence=evidence, examined=examined)


_LEFT_BY_SIGNOFF = re.compile(r"\.staging-[0-9a-f]+\.json(\.sig)?|\..+\.[0-9a-f]{8}\.tmp")
"""A sign-off stopped before its rename leaves its staging record or a temporary file: not a record, not damage."""


def foreign_entries(directory: Path) -> list[str]:
    """What in `signoffs/` is not a sign-off's own: the folder itself as a link or a file, and inside it any entry that is
    not a regular `<record>.json` or the `<record>.json.sig` of one present (each with why), sorted."""
    from .signoffs import SIGNATURE_SUFFIX

    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        target = f" to {os.readlink(directory)!r}" if stat.S_ISLNK(st.st_mode) else ""
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
        return [f"{layout.SIGNOFFS_DIR} itself is {kind}{target}, not a directory"]
    try:
        with os.scandir(directory) as listing:
            entries = {entry.name: entry.stat(follow_symlinks=False).st_mode for entry in listing}
    except OSError as exc:
        return [f"{layout.SIGNOFFS_DIR} cannot be listed ({exc.strerror or exc})"]
    foreign = []
    for entry, mode in sorted(entries.items()):
        record = entry.removesuffix(SIGNATURE_SUFFIX)
        if not stat.S_ISREG(mode):
            foreign.append(f"{entry!r} ({kind_of(mode)})")
        elif _LEFT_BY_SIGNOFF.fullmatch(entry):
            continue
        elif not record.endswith(".json") or record.startswith("."):
            foreign.append(f"{entry!r} (not a record or a signature)")
        elif record != entry and record not in entries:
            foreign.append(f"{entry!r} (a signature without its record)")
    return foreign


def _describe(status, *, late: bool = False) -> str:  # noqa: ANN001 (SignoffStatus, imported lazily above)
    """`approve valid (alice@x)`, `approve revoked (alice@x; revoked by bob@x in 2026…-revoke-….json)`, and for an approval
    dated after the run started `approve valid (alice@x; signed 2026-…, after the run started: it did not gate the run)`."""
    if status.state == "revoked":
        return f"{status.decision} revoked ({status.by}; {status.reason.split(';')[0]})"
    if status.decision == "revoke":
        return f"revoke of {status.revokes} {status.state} ({status.by})"
    when = f"; signed {status.at}, after the run started: it did not gate the run" if late else ""
    return f"{status.decision or status.file} {status.state} ({status.by}{when})"
