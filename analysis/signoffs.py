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

Imports only the standard library, pydantic and `schemas` (no torch, transformers or runner).
"""

import base64
import binascii
import hashlib
import os
import re
import shlex
import shutil
import stat
import struct
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from genrun._safe_read import kind_of
from genrun.schemas import layout
from genrun.schemas.digests import plan_digest, snapshot_digest
from genrun.schemas.signoff import Decision, DigestKind, Signoff
from genrun.snapshot_dir import ArtifactError, ArtifactNewer, SnapshotDir

SignoffState = Literal["valid", "unsigned", "unverified", "revoked", "invalid"]

_T = TypeVar("_T")

NAMESPACE_SUFFIX = "@genrun"
SIGNATURE_SUFFIX = ".sig"
DIGEST_KIND_OF: dict[str, DigestKind] = {"approve": "plan", "accept": "snapshot", "reject": "snapshot", "revoke": "record"}
"""Which digest each decision binds: a plan is approved before it runs, results are judged after sealing,
a revocation binds the record it supersedes."""
ALLOWED_SIGNERS_ENV = "GENRUN_ALLOWED_SIGNERS"

SSH_KEYGEN = "ssh-keygen"
SSH_KEYGEN_MISSING = "ssh-keygen not found: install the 'openssh-client' package (Debian/Ubuntu: apt-get install openssh-client)"
NO_ALLOWED_SIGNERS = (
    f"no allowed-signers file: pass --allowed-signers FILE, set {ALLOWED_SIGNERS_ENV} or git's gpg.ssh.allowedSignersFile"
)
UNVERIFIED = "signed, not verified (no allowed-signers file)"
SSH_KEYGEN_TIMEOUT = 60  # seconds; verification of one small file takes milliseconds
MAX_SIGNATURE_BYTES = 64 << 10
"""An armored SSH signature is under 1 KiB (an RSA-16384 one under 5 KiB): a larger `.sig` is never handed to ssh-keygen."""
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
        record = _read_signoffs_file(path, lambda snapshot, name: snapshot.read(name, Signoff))
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
    if os.path.lexists(sig) and (unusable := _unusable_signature(sig)):  # ssh-keygen would follow a link, block, or read for minutes
        return _status(path, record, "invalid", "; ".join([*problems, f"bad signature: {sig.name} {unusable}"]))
    if allowed_signers is None and sig.is_file():  # nobody named the trusted keys: a warning, not a failure
        if not _signature_matches(path, sig, namespace_for(record.decision)):
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
        actual = hashlib.sha256(_read_signoffs_file(target, SnapshotDir.read_bytes)).hexdigest()
    except ArtifactError as exc:
        return [f"revoked record {record.revokes} cannot be read: {exc.reason}"]
    if actual != record.digest:
        return [f"digest no longer matches: record binds record digest {short(record.digest)} of {record.revokes}, current is {short(actual)}"]
    return []


def _unusable_signature(sig: Path) -> str | None:
    """Why `sig` cannot be an SSH signature file (a link, FIFO, device, or larger than any signature); None if it may be."""
    st = os.lstat(sig)
    if not stat.S_ISREG(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not a regular file"
    if st.st_size > MAX_SIGNATURE_BYTES:
        return f"is {st.st_size:,} bytes, more than the {MAX_SIGNATURE_BYTES:,} any SSH signature takes"
    return None


def _signature_matches(record: Path, sig: Path, namespace: str) -> bool:
    """`ssh-keygen -Y check-novalidate`: the signature is over this record, whoever made it (True if ssh-keygen is absent)."""
    if shutil.which(SSH_KEYGEN) is None:
        return True  # cannot tell; the state stays "unverified", which already says nothing was proven
    return _ssh_keygen(["-Y", "check-novalidate", "-n", namespace, "-s", str(sig)], record).returncode == 0


def principals_for_key(allowed_signers: Path, public_key: str, namespace: str) -> list[str]:
    """The principals an allowed-signers file lists for `public_key` ("ssh-ed25519 AAAA…") and `namespace`.

    Format (ssh-keygen(1), ALLOWED SIGNERS): `principals [options] keytype base64-key [comment]`;
    lines whose `namespaces="…"` option excludes `namespace`, and wildcard principals, are skipped.
    """
    kind, blob = public_key.split()[:2]
    found: list[str] = []
    for line in Path(allowed_signers).read_text(errors="replace").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            fields = shlex.split(line)
        except ValueError:
            continue
        if blob not in fields or fields.index(blob) < 2 or fields[fields.index(blob) - 1] != kind:
            continue
        options = fields[1 : fields.index(blob) - 1]
        namespaces = [o.split("=", 1)[1].split(",") for o in options if o.lower().startswith("namespaces=")]
        if namespaces and namespace not in namespaces[0]:
            continue
        found += [p for p in fields[0].split(",") if p and not any(c in p for c in "*?!")]
    return list(dict.fromkeys(found))


class Verdict(NamedTuple):
    """Outcome of checking one signature: ok, and a message saying who signed or why it fails."""

    ok: bool
    message: str


def verify_signature(record: Path, sig: Path, principal: str, namespace: str, allowed_signers: Path | None) -> Verdict:
    """`ssh-keygen -Y verify`; on failure, find out why (namespace, signature, signer) for the report."""
    if not sig.is_file():
        return Verdict(False, f"record says signed but {sig.name} is missing")
    if allowed_signers is None:
        return Verdict(False, NO_ALLOWED_SIGNERS)
    if not allowed_signers.is_file():
        fix = "pass --allowed-signers FILE or fix git's gpg.ssh.allowedSignersFile"
        return Verdict(False, f"allowed-signers file {allowed_signers} does not exist: {fix}")
    if shutil.which(SSH_KEYGEN) is None:
        return Verdict(False, f"{SSH_KEYGEN_MISSING}; the signature cannot be checked")
    verify = _ssh_keygen(["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", namespace, "-s", str(sig)], record)
    if verify.returncode == 0:
        return Verdict(True, f"signed by {principal} ({_key_description(verify.stdout)})")
    return Verdict(False, diagnose_failure(record, sig, principal, namespace, allowed_signers, verify.stderr))


def diagnose_failure(record: Path, sig: Path, principal: str, namespace: str, allowed_signers: Path, verify_stderr: str) -> str:
    """Name the first reason a verification failed: not a signature, wrong namespace, bad signature, unknown signer."""
    try:
        header = read_sshsig(_read_signoffs_file(sig, SnapshotDir.read_bytes))
    except ArtifactError as exc:
        return f"bad signature: {sig.name} is not an SSH signature ({exc.reason})"
    except ValueError as exc:
        return f"bad signature: {sig.name} is not an SSH signature ({exc})"
    if header.namespace != namespace:
        return f"signature namespace is not {namespace} (the signature was made for {header.namespace})"
    check = _ssh_keygen(["-Y", "check-novalidate", "-n", namespace, "-s", str(sig)], record)
    if check.returncode != 0:
        return "bad signature: the record does not match its signature (changed after signing, or signed by another file)"
    found = _ssh_keygen(["-Y", "find-principals", "-f", str(allowed_signers), "-s", str(sig)], None)
    principals = found.stdout.split() if found.returncode == 0 else []
    if principal in principals:  # the key is listed for this principal, but not for this namespace or time
        detail = _first_line_text(verify_stderr) or "restricted by namespaces= or valid-before/valid-after"
        return f"signer {principal} not allowed for {namespace} in allowed signers {allowed_signers} ({detail})"
    if not principals and (validity := _KEY_VALIDITY.search(found.stderr)):  # listed, but outside its valid-after/-before
        return f"signer {principal}'s key {validity.group(1)} in allowed signers {allowed_signers} ({validity.group(2).strip()})"
    listed = f" (the signing key is listed for {', '.join(principals)})" if principals else ""
    return f"signer {principal} not in allowed signers {allowed_signers}{listed}"


_KEY_VALIDITY = re.compile(r"key (has expired|is not yet valid): (.*)")
"""What `ssh-keygen -Y find-principals` says of a key whose allowed-signers line it skipped for its time limits."""


class SshSigHeader(NamedTuple):
    """The readable part of an SSHSIG blob (PROTOCOL.sshsig in OpenSSH)."""

    key_type: str
    namespace: str


def read_sshsig(armored: bytes) -> SshSigHeader:
    """Key type and namespace of an armored `-----BEGIN SSH SIGNATURE-----` file; ValueError if malformed."""
    lines = armored.decode("ascii", errors="replace").strip().splitlines()
    if len(lines) < 3 or lines[0] != "-----BEGIN SSH SIGNATURE-----" or lines[-1] != "-----END SSH SIGNATURE-----":
        raise ValueError("missing the SSH SIGNATURE armor lines")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"base64: {exc}") from exc
    if blob[:6] != b"SSHSIG":
        raise ValueError("missing the SSHSIG magic")
    offset = 6 + 4  # magic, uint32 version
    public_key, offset = _ssh_string(blob, offset)
    namespace, offset = _ssh_string(blob, offset)
    key_type, _ = _ssh_string(public_key, 0)
    return SshSigHeader(key_type=key_type.decode(errors="replace"), namespace=namespace.decode(errors="replace"))


def _ssh_string(blob: bytes, offset: int) -> tuple[bytes, int]:
    """RFC 4251 `string`: uint32 length then the bytes."""
    if offset + 4 > len(blob):
        raise ValueError("truncated")
    (length,) = struct.unpack_from(">I", blob, offset)
    end = offset + 4 + length
    if end > len(blob):
        raise ValueError("truncated")
    return blob[offset + 4 : end], end


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


def _ssh_keygen(args: Sequence[str], stdin_file: Path | None) -> subprocess.CompletedProcess[str]:
    """Run ssh-keygen with the record on stdin (never a terminal: it must not prompt); one that does not answer in time
    is a failed run whose stderr says so."""
    data = b"" if stdin_file is None else _read_signoffs_file(stdin_file, SnapshotDir.read_bytes)  # bounded, never a link
    try:
        done = subprocess.run([SSH_KEYGEN, *args], input=data, capture_output=True, timeout=SSH_KEYGEN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([SSH_KEYGEN, *args], -1, "", f"ssh-keygen did not finish within {SSH_KEYGEN_TIMEOUT} s")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


_GOOD_SIGNATURE = re.compile(r"with (\S+) key (\S+)")


def _key_description(verify_stdout: str) -> str:
    """`Good "x" signature for p with ED25519 key SHA256:…` -> `ED25519 key SHA256:…`."""
    match = _GOOD_SIGNATURE.search(verify_stdout)
    return f"{match.group(1)} key {match.group(2)}" if match else "SSH key"


def _read_signoffs_file(path: Path, read: Callable[[SnapshotDir, str], _T]) -> _T:
    """`read(snapshot, "signoffs/<name>")` for a file of a snapshot's `signoffs/` (bounded, never through a link)."""
    return read(SnapshotDir(path.parent.parent), f"{path.parent.name}/{path.name}")


def _first_line_text(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
