"""Owner sign-offs: append a record bound to a digest, sign it as git signs with SSH, and gate execution.

Records. Each sign-off is a new file `signoffs/<UTC time>-<decision>-<8 hex>.json` (a
`schemas.Signoff`); an existing record is never modified or replaced. The record is written
atomically to a dot-prefixed staging file, signed there, and then hard-linked to its final name
(signature first, record last; `link` fails if the name exists, like `O_EXCL`), so two concurrent
sign-offs both survive and a reader never sees a signed record without its signature. Records and
signatures are made read-only (0o444) like sealed files. `signoffs/` is outside the manifest, so
records never change the snapshot digest.

Binding. `approve` binds the plan digest (sha256 of `frozen-sha256.txt`; works before execution);
`accept` and `reject` bind the snapshot digest (sha256 of `manifest-sha256.txt`) and need a sealed
snapshot.

Signatures. `ssh-keygen -Y sign -f KEY -n <decision>@genrun RECORD` writes `RECORD.sig`; the
namespace per decision means an `accept` signature can never pass as an `approve`. The key is
`--key`, else git's `user.signingkey` when `gpg.format = ssh` (a literal `ssh-ed25519 AAAA…` value
is used through ssh-agent, as git does); with neither the record is unsigned, and says so.

Signer. `--by` defaults to the principal the allowed-signers file lists for the signing key (so
the record names the principal verification will look up), then git's `user.email`. An explicit
`--by` that the file lists under other principals only is refused before anything is written, and so
is a signing key the file does not list at all (the refusal prints the line that lists it).

Revocation. `revoke` appends a record binding the sha256 of an earlier record (signed like the
rest); the earlier record is then reported `revoked`. Records are still never modified.

Approval gate (`check_approval`, used by `genrun execute/run --require-approval` and `[policy]
require_approval`). A plan may run only with an `approve` record, not revoked, whose digest equals
the *current* plan digest and whose signature verifies against the allowed-signers file
(`--allowed-signers`, `$GENRUN_ALLOWED_SIGNERS`, git's `gpg.ssh.allowedSignersFile`) for its `by` and
the `approve@genrun` namespace. Anyone who can write the directory can write an unsigned record, so
an unsigned (or signed but unverifiable) approval opens the gate only when the request explicitly
says `[policy] require_approval = "any"`; the returned status says so, for the executor to show.
"""

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from genrun.analysis.signoffs import (
    DIGEST_KIND_OF,
    SIGNATURE_SUFFIX,
    SignoffStatus,
    evaluate_signoffs,
    git_config,
    namespace_for,
    record_files,
    resolve_allowed_signers,
    short,
)
from genrun.analysis.ssh_signatures import NO_ALLOWED_SIGNERS, SSH_KEYGEN, SSH_KEYGEN_MISSING, principals_for_key
from genrun.schemas import layout
from genrun.schemas.digests import plan_digest, snapshot_digest
from genrun.schemas.signoff import Signoff
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from . import __version__
from ._io import fsync_dir
from .errors import ApprovalRequired, SignoffError, StoreError
from .store import describe_os_error, is_sealed, open_snapshot

DECISIONS = ("approve", "accept", "reject")
"""What `--decision` takes; `revoke` is made by `--revoke RECORD` only."""
READ_ONLY = 0o444
SIGN_TIMEOUT = 300  # seconds; a passphrase may be typed at the terminal
NAME_ATTEMPTS = 16  # a name collision needs the same second, decision and 32 random bits
_LITERAL_KEY = re.compile(r"^(key::)?(ssh-[a-z0-9-]+|ecdsa-[a-z0-9-]+|sk-[a-z0-9@.-]+) [A-Za-z0-9+/=]+")


class SigningKey(NamedTuple):
    """What `ssh-keygen -Y sign -f` gets, and where it came from (for error messages)."""

    path: Path | None
    """A private key file (or a public one whose private half is in ssh-agent); None for `literal`."""
    origin: str
    """`--key` or `git's user.signingkey`."""
    literal: str | None = None
    """A public key written in git's config: signed through ssh-agent (`-U`), as git does."""


def make_signoff(
    snapshot_dir: Path,
    decision: str,
    by: str | None,
    key: Path | None,
    note: str | None,
    accepted_gaps: Sequence[str],
    *,
    allowed_signers: Path | None = None,
    revokes: str | None = None,
) -> Path:
    """Write a new sign-off record (signed when a key is given or configured in git); return its path.

    `by` None means the principal `allowed_signers` (else `$GENRUN_ALLOWED_SIGNERS`, else git's
    file) lists for the key, then git's `user.email`; `key` None means git's `user.signingkey` if
    `gpg.format` is `ssh`, else an unsigned record. `decision="revoke"` needs `revokes`: the name
    (or path) of the record under `signoffs/` it supersedes.
    """
    snapshot_dir = open_snapshot(snapshot_dir)
    if decision not in DIGEST_KIND_OF:
        raise SignoffError(f"unknown decision {decision!r}: choose one of {', '.join(DECISIONS)} (or --revoke RECORD)")
    kind = DIGEST_KIND_OF[decision]
    if kind == "snapshot" and not is_sealed(snapshot_dir):
        raise SignoffError(
            f"{decision} needs a sealed snapshot: {snapshot_dir} has no {layout.MANIFEST} (the run has not finished, "
            "or was killed); run 'genrun execute' or 'genrun verify' first"
        )
    revoked = find_revoked_record(snapshot_dir, revokes) if decision == "revoke" else None
    signing_key = resolve_key(key)
    if signing_key is not None and shutil.which(SSH_KEYGEN) is None:
        raise SignoffError(SSH_KEYGEN_MISSING)  # before anything is written
    signer = resolve_signer(by, signing_key, resolve_allowed_signers(allowed_signers), namespace_for(decision))
    now = datetime.now(timezone.utc)
    record = Signoff(
        decision=decision,  # type: ignore[arg-type]  # checked against DIGEST_KIND_OF above
        digest_kind=kind,
        digest=_bound_digest(snapshot_dir, kind, revoked),
        snapshot_id=snapshot_dir.name,
        by=signer,
        at=now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        note=note,
        accepted_gaps=tuple(accepted_gaps),
        genrun_version=__version__,
        signed=signing_key is not None,
        revokes=revoked.name if revoked is not None else None,
    )
    return write_record(snapshot_dir / layout.SIGNOFFS_DIR, record, signing_key, now)


def _bound_digest(snapshot_dir: Path, kind: str, revoked: Path | None) -> str:
    if kind == "plan":
        return plan_digest(snapshot_dir)
    if kind == "record" and revoked is not None:
        return hashlib.sha256(SnapshotDir(snapshot_dir).read_bytes(f"{layout.SIGNOFFS_DIR}/{revoked.name}")).hexdigest()
    return snapshot_digest(snapshot_dir)


def find_revoked_record(snapshot_dir: Path, revokes: str | None) -> Path:
    """The record `--revoke RECORD` names (a file name under signoffs/, or a path to it); it must not be a revocation."""
    existing = {p.name: p for p in record_files(snapshot_dir)}
    name = Path(revokes).name if revokes else ""
    if name not in existing:
        listed = ", ".join(existing) or "none"
        raise SignoffError(
            f"--revoke {revokes!r}: no such record in {snapshot_dir / layout.SIGNOFFS_DIR} (records: {listed}); "
            "pass a record's file name as 'genrun verify' lists it"
        )
    try:
        target = SnapshotDir(snapshot_dir).read(f"{layout.SIGNOFFS_DIR}/{name}", Signoff)
    except ArtifactError:
        return existing[name]  # an unparseable record may be revoked too: that is how an owner disowns it
    if target.decision == "revoke":
        raise SignoffError(f"--revoke {name}: that record is itself a revocation; write a new approve/accept/reject instead")
    return existing[name]


def resolve_signer(by: str | None, key: "SigningKey | None" = None, allowed_signers: Path | None = None,
                   namespace: str | None = None) -> str:
    """`--by`, else the principal the allowed-signers file lists for `key`, else git's `user.email`.

    An explicit `--by` that the file lists the key under other principals only is refused, and so is a key the file
    does not list: every verification of the record would fail, and a record can never be changed.
    """
    listed = _listed_principals(key, allowed_signers, namespace)
    if listed == [] and key is not None and allowed_signers is not None:  # a file that does not list this key
        _refuse_an_unlisted_key(by, key, allowed_signers, namespace)
    if by is not None and listed and by not in listed:
        raise SignoffError(
            f"--by {by!r} does not match the signing key: {allowed_signers} lists that key for {', '.join(listed)}; "
            f"pass --by {listed[0]} (or omit --by), or list the key for {by} in the allowed-signers file"
        )
    listed = listed or []
    if by is None and len(listed) > 1:
        raise SignoffError(f"{allowed_signers} lists the signing key for several principals ({', '.join(listed)}): pass --by one of them")
    signer = by if by is not None else (listed[0] if listed else git_config("user.email"))
    if signer is None:
        raise SignoffError(
            "no signer: pass --by NAME (e.g. your e-mail), list your key in an allowed-signers file (--allowed-signers FILE), "
            "or set git's user.email (git config --global user.email you@example.com)"
        )
    if not signer.strip() or any(c.isspace() for c in signer):
        raise SignoffError(f"--by {signer!r} is not a valid principal: use one word without spaces, e.g. an e-mail address")
    return signer


def _listed_principals(key: "SigningKey | None", allowed_signers: Path | None, namespace: str | None) -> list[str] | None:
    """Principals the allowed-signers file lists for the key's public half; None when that cannot be told (no key, no
    file, a key whose public half needs its passphrase)."""
    if key is None or allowed_signers is None or namespace is None or not allowed_signers.is_file():
        return None
    public = public_key_of(key)
    return principals_for_key(allowed_signers, public, namespace) if public else None


def _refuse_an_unlisted_key(by: str | None, key: "SigningKey", allowed_signers: Path, namespace: str | None) -> None:
    """SignoffError naming the line to add: a record signed with a key the file does not list fails every `verify`
    (and the gate), and a record can never be changed, only revoked."""
    public = public_key_of(key)
    principal = by or git_config("user.email") or "you@example.com"
    raise SignoffError(
        f"{allowed_signers} does not list the signing key{f' for {namespace}' if namespace else ''} ({public}): "
        f"'genrun verify' would report the record as invalid, and records cannot be changed. Nothing was written. "
        f"List the key, then sign again: echo '{principal} {public}' >> {allowed_signers}"
    )


def public_key_of(key: SigningKey) -> str | None:
    """`ssh-ed25519 AAAA…` of a signing key: the literal, `KEY.pub`, or `ssh-keygen -y` (None if it needs a passphrase)."""
    if key.literal is not None:
        return key.literal
    assert key.path is not None  # a SigningKey has a path or a literal
    for candidate in (key.path, key.path.with_name(key.path.name + ".pub")):
        text = candidate.read_text(errors="replace").strip() if candidate.is_file() else ""
        if _LITERAL_KEY.match(text):
            return " ".join(text.split()[:2])
    if shutil.which(SSH_KEYGEN) is None:
        return None
    done = subprocess.run([SSH_KEYGEN, "-y", "-P", "", "-f", str(key.path)], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=SIGN_TIMEOUT)
    return " ".join(done.stdout.split()[:2]) if done.returncode == 0 and _LITERAL_KEY.match(done.stdout) else None


def resolve_key(key: Path | None) -> SigningKey | None:
    """`--key PATH`, else git's `user.signingkey` when `gpg.format = ssh`, else None (unsigned)."""
    if key is not None:
        return _existing_key(Path(key).expanduser(), "--key", "pass the path of an SSH private key, e.g. --key ~/.ssh/id_ed25519")
    if git_config("gpg.format") != "ssh":
        return None
    configured = git_config("user.signingkey")
    if configured is None:
        return None
    if _LITERAL_KEY.match(configured):
        return _literal_key(configured)
    return _existing_key(
        Path(configured).expanduser(), "git's user.signingkey", "fix it with 'git config user.signingkey PATH' or pass --key PATH"
    )


def _existing_key(path: Path, origin: str, fix: str) -> SigningKey:
    if not path.is_file():
        raise SignoffError(f"key file {path} does not exist ({origin}); {fix}")
    return SigningKey(path=path, origin=origin)


def _literal_key(value: str) -> SigningKey:
    """git allows `user.signingkey = ssh-ed25519 AAAA…`: sign with `-U` through ssh-agent, as git does."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        raise SignoffError(
            "git's user.signingkey is a public key, not a file: its private half must be in ssh-agent, "
            "but SSH_AUTH_SOCK is not set; start ssh-agent and 'ssh-add' the key, or pass --key PATH"
        )
    return SigningKey(path=None, origin="git's user.signingkey", literal=value.removeprefix("key::"))


def write_record(directory: Path, record: Signoff, key: SigningKey | None, now: datetime) -> Path:
    """Stage, sign, then link the record under a fresh name; nothing existing is touched."""
    try:
        directory.mkdir(exist_ok=True)
        planted = not stat.S_ISDIR(os.lstat(directory).st_mode)
    except OSError as exc:
        raise StoreError(describe_os_error(exc, directory)) from exc
    if planted:  # a link here would put the record (and its chmod) outside the snapshot
        raise SignoffError(f"{directory} is not a directory of the snapshot (a link?); a sign-off is never written outside it: "
                           "remove it, then sign off again")
    staging = directory / f".staging-{secrets.token_hex(8)}.json"
    staged_sig = _sig_path(staging)
    try:
        SnapshotDir(directory.parent, writable=True).write(f"{directory.name}/{staging.name}", record)
        os.chmod(staging, READ_ONLY)
        if key is not None:
            sign_file(staging, key, namespace_for(record.decision))
            os.chmod(staged_sig, READ_ONLY)
        final = _link_new_name(directory, staging, staged_sig if key is not None else None, record.decision, now)
        fsync_dir(directory)
        return final
    except OSError as exc:
        raise StoreError(describe_os_error(exc, directory)) from exc
    finally:
        for leftover in (staging, staged_sig):
            with contextlib.suppress(OSError):  # absent, or a read-only filesystem: the error above already says why
                os.unlink(leftover)


def sign_file(path: Path, key: SigningKey, namespace: str) -> Path:
    """`ssh-keygen -Y sign -f KEY -n NAMESPACE FILE` -> `FILE.sig`; errors name the key and ssh-keygen's reason."""
    executable = shutil.which(SSH_KEYGEN)
    if executable is None:
        raise SignoffError(SSH_KEYGEN_MISSING)
    with tempfile.TemporaryDirectory(prefix="genrun-signingkey-") as scratch:
        key_file, agent = key.path, []
        if key.literal is not None:  # ssh-keygen wants a file: the public key, with -U for "private half in the agent"
            key_file, agent = Path(scratch) / "key.pub", ["-U"]
            key_file.write_text(key.literal + "\n")
        args = [executable, "-Y", "sign", "-f", str(key_file), "-n", namespace, *agent, str(path)]
        # stdin is never the terminal: ssh-keygen must not wait on a question; a passphrase is read from /dev/tty.
        done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SIGN_TIMEOUT)
    if done.returncode != 0:
        reason = done.stderr.strip().replace("\n", "; ") or f"exit status {done.returncode}"
        hint = " (a passphrase-protected key needs a terminal, or load it into ssh-agent with 'ssh-add')"
        raise SignoffError(f"ssh-keygen could not sign with {key.path or key.literal} ({key.origin}): {reason}{hint}")
    return _sig_path(path)


def _link_new_name(directory: Path, staging: Path, staged_sig: Path | None, decision: str, now: datetime) -> Path:
    """Hard-link the signature, then the record, to a name no one has; `link` refuses an existing name."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    for _ in range(NAME_ATTEMPTS):
        final = directory / f"{stamp}-{decision}-{secrets.token_hex(4)}.json"
        if staged_sig is not None and not _place_exclusive(staged_sig, _sig_path(final)):
            continue
        if _place_exclusive(staging, final):
            return final
        if staged_sig is not None:  # ours: the link above succeeded
            os.unlink(_sig_path(final))
    raise SignoffError(f"could not find a free sign-off record name in {directory} after {NAME_ATTEMPTS} attempts")


def _place_exclusive(source: Path, target: Path) -> bool:
    """Put `source`'s bytes at `target` only if `target` does not exist; False if it does."""
    try:
        os.link(source, target)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
    # Filesystems without hard links: an exclusive create still never replaces another record.
    try:
        with open(target, "xb") as out:
            out.write(source.read_bytes())
            out.flush()
            os.fsync(out.fileno())
    except FileExistsError:
        return False
    os.chmod(target, READ_ONLY)
    return True


def _sig_path(record: Path) -> Path:
    return record.with_name(record.name + SIGNATURE_SUFFIX)


def check_approval(snapshot_dir: Path, allowed_signers: Path | None = None, *, allow_unsigned: bool = False) -> SignoffStatus:
    """The approval that lets this plan run; ApprovalRequired if none.

    Only a signed approval that verifies against the allowed-signers file counts (`allowed_signers`
    None means `$GENRUN_ALLOWED_SIGNERS`, then git's `gpg.ssh.allowedSignersFile`), unless
    `allow_unsigned` (`[policy] require_approval = "any"`): then an unsigned or unverifiable
    approval bound to the current plan digest counts too, verified ones preferred.
    """
    snapshot_dir = open_snapshot(snapshot_dir)
    allowed_signers = resolve_allowed_signers(allowed_signers)
    approvals = [s for s in evaluate_signoffs(snapshot_dir, allowed_signers) if s.decision == "approve"]
    for state in ("valid", "unsigned", "unverified") if allow_unsigned else ("valid",):
        usable = [s for s in approvals if s.state == state]
        if usable:
            return usable[-1]  # the most recent
    raise ApprovalRequired(_approval_refusal(snapshot_dir, approvals, allowed_signers, allow_unsigned))


def describe_approval(status: SignoffStatus) -> str:
    """One line for the executor: who approved, signed or not, and in which record."""
    where = f"{layout.SIGNOFFS_DIR}/{status.file}"
    if status.state == "valid":
        return f"plan approved: {status.reason} at {status.at} ({where})"
    how = "UNSIGNED" if status.state == "unsigned" else "signed but NOT VERIFIED (no allowed-signers file)"
    return f"plan approved by {status.by} at {status.at}, {how}, accepted by [policy] require_approval = \"any\" ({where})"


def _approval_refusal(snapshot_dir: Path, approvals: list[SignoffStatus], allowed_signers: Path | None, allow_unsigned: bool) -> str:
    found = (
        "approve records found, none usable: " + "; ".join(f"{s.file}: {s.state}, {s.reason}" for s in approvals)
        if approvals
        else f"there is no approve record in {snapshot_dir / layout.SIGNOFFS_DIR}"
    )
    if allow_unsigned:
        rule = '[policy] require_approval = "any": a signed or unsigned approve record counts'
    else:
        trust = f"allowed-signers file {allowed_signers}" if allowed_signers is not None else NO_ALLOWED_SIGNERS
        rule = (
            "a signed approve record whose signature verifies counts (unsigned ones count only with "
            f'[policy] require_approval = "any" in the request); {trust}'
        )
    return (
        f"{snapshot_dir.name} may not run without an approve sign-off for its current plan digest "
        f"{short(plan_digest(snapshot_dir))}; rule: {rule}; {found}. "
        f"The plan is kept, not executed: review it, run 'genrun signoff {snapshot_dir} --decision approve --key ~/.ssh/genrun_ed25519' "
        f"(and list the key in the allowed-signers file), then 'genrun execute {snapshot_dir} --require-approval'"
    )
