"""SSH signatures of sign-off records: `ssh-keygen -Y` (verify, check-novalidate, find-principals), why a verification
failed, the allowed-signers file's principals for a key, and the readable header of an SSHSIG file.

`signoffs` judges records (what they bind, revocations) and asks this module whether a signature holds. A `.sig` is
handed to ssh-keygen only when it is a regular file of at most `MAX_SIGNATURE_BYTES`, and the record reaches ssh-keygen on
stdin, read bounded and never through a link; ssh-keygen that does not answer in `SSH_KEYGEN_TIMEOUT` is a failed check.
"""

import base64
import binascii
import os
import re
import shlex
import shutil
import stat
import struct
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

from genrun._safe_read import kind_of
from genrun.snapshot_dir import ArtifactError, SnapshotDir

_T = TypeVar("_T")

ALLOWED_SIGNERS_ENV = "GENRUN_ALLOWED_SIGNERS"
SSH_KEYGEN = "ssh-keygen"
SSH_KEYGEN_MISSING = "ssh-keygen not found: install the 'openssh-client' package (Debian/Ubuntu: apt-get install openssh-client)"
NO_ALLOWED_SIGNERS = (
    f"no allowed-signers file: pass --allowed-signers FILE, set {ALLOWED_SIGNERS_ENV} or git's gpg.ssh.allowedSignersFile"
)
SSH_KEYGEN_TIMEOUT = 60  # seconds; verification of one small file takes milliseconds
MAX_SIGNATURE_BYTES = 64 << 10
"""An armored SSH signature is under 1 KiB (an RSA-16384 one under 5 KiB): a larger `.sig` is never handed to ssh-keygen."""


def unusable_signature(sig: Path) -> str | None:
    """Why `sig` cannot be an SSH signature file (a link, FIFO, device, or larger than any signature); None if it may be."""
    st = os.lstat(sig)
    if not stat.S_ISREG(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not a regular file"
    if st.st_size > MAX_SIGNATURE_BYTES:
        return f"is {st.st_size:,} bytes, more than the {MAX_SIGNATURE_BYTES:,} any SSH signature takes"
    return None


def signature_matches(record: Path, sig: Path, namespace: str) -> bool:
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
        header = read_sshsig(read_signoffs_file(sig, SnapshotDir.read_bytes))
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


def _ssh_keygen(args: Sequence[str], stdin_file: Path | None) -> subprocess.CompletedProcess[str]:
    """Run ssh-keygen with the record on stdin (never a terminal: it must not prompt); one that does not answer in time
    is a failed run whose stderr says so."""
    data = b"" if stdin_file is None else read_signoffs_file(stdin_file, SnapshotDir.read_bytes)  # bounded, never a link
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


def read_signoffs_file(path: Path, read: Callable[[SnapshotDir, str], _T]) -> _T:
    """`read(snapshot, "signoffs/<name>")` for a file of a snapshot's `signoffs/` (bounded, never through a link)."""
    return read(SnapshotDir(path.parent.parent), f"{path.parent.name}/{path.name}")


def _first_line_text(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
