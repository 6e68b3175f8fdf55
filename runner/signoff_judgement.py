"""A snapshot's sign-offs as `genrun ls` shows them: judged as they are now, and what that judgement depends on.

`ls` may reuse a judgement it cached only while everything it depends on is unchanged (`signoffs_key`: each record's
stat, the plan it binds, the allowed-signers file's contents) and its time has not come (`Trust.until`: the next
`valid-after`/`valid-before` of the allowed-signers file's keys). Only a signature that verifies now counts as a signer.
"""

import hashlib
import os
import re
import stat
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from genrun.schemas import layout

if TYPE_CHECKING:
    from genrun.analysis.signoffs import SignoffStatus

_TIME_LIMIT = re.compile(r"valid-(?:after|before)=\"?(\d{8}(?:\d{4}(?:\d{2})?)?)(z?)\"?")
_MAX_ALLOWED_SIGNERS = 4 << 20  # bytes: an allowed-signers file of a team is a few kB


class Trust(NamedTuple):
    """The allowed-signers file a listing judges signatures against: its identity (path and content) and the moments
    (`valid-after`/`valid-before` of its keys) at which a judgement made with it may change."""

    path: Path | None
    identity: str
    limits: tuple[float, ...]
    """Epoch seconds of every key's time limit; -inf for one that could not be read (no judgement then outlives now)."""

    @classmethod
    def of(cls, path: Path | None) -> "Trust":
        if path is None:
            return cls(None, "-", ())
        try:
            with open(path, "rb") as file:
                data = file.read(_MAX_ALLOWED_SIGNERS + 1)
        except OSError as exc:
            return cls(path, f"{path}|{exc.strerror}", ())
        limits: list[float] = []
        for line in data.decode(errors="replace").lower().splitlines():
            found = _TIME_LIMIT.findall(line)
            # a limit not read, or a certificate authority (whose certificates carry their own validity): judged each time
            if len(found) != line.count("valid-after") + line.count("valid-before") or "cert-authority" in line:
                limits.append(float("-inf"))
            for digits, utc in found:  # a date alone: its start and its end, whichever ssh-keygen takes
                limits += [_epoch(digits, utc == "z"), *([_epoch(digits, utc == "z") + 86_400] if len(digits) == 8 else [])]
        return cls(path, f"{path}|{hashlib.sha256(data).hexdigest()}", tuple(limits))

    def until(self, now: float) -> float | None:
        """When a judgement made `now` may stop holding: the next time limit of a key (None: none comes)."""
        if float("-inf") in self.limits:
            return now
        return min((limit for limit in self.limits if limit > now), default=None)


Trusted = Callable[[], Trust]
"""The allowed-signers file, resolved (git asked, the file read) when first called: only judging or keying a sign-off
record calls it, so a listing of snapshots with no record never resolves it (nor imports what resolves it)."""


def _epoch(digits: str, utc: bool) -> float:
    """ssh-keygen's `YYYYMMDD[HHMM[SS]]` (UTC with `Z`, else local time), as epoch seconds."""
    when = datetime.strptime(digits.ljust(14, "0"), "%Y%m%d%H%M%S")
    return when.replace(tzinfo=timezone.utc).timestamp() if utc else time.mktime(when.timetuple())


def signoffs_key(base: str, trust: Trusted) -> str:
    """What a snapshot's sign-off judgement depends on besides time (`base`: its path ending in "/"): "-" without a
    `signoffs/` folder; the folder's stat while it is empty (adding a record renames one in, which changes it); else a
    digest of each record's stat, the plan it binds (`frozen-sha256.txt`) and the allowed-signers file."""
    folder = base + layout.SIGNOFFS_DIR
    try:
        st = os.lstat(folder)
    except OSError:
        return "-"
    if stat.S_ISDIR(st.st_mode) and st.st_nlink == 2 and not os.listdir(folder):
        return _empty_key(st)
    parts = [trust().identity]
    try:
        for name in [layout.FROZEN_MANIFEST, *(f"{layout.SIGNOFFS_DIR}/{n}" for n in sorted(os.listdir(folder)))]:
            st = os.lstat(base + name)
            parts.append(f"{name}|{st.st_mode}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}")
    except OSError as exc:
        parts.append(f"unreadable {exc.errno}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _empty_key(folder: os.stat_result) -> str:
    return f"empty|{folder.st_mode}|{folder.st_ino}|{folder.st_mtime_ns}|{folder.st_ctime_ns}"


def unchanged_key(key: str, store: str, name: str, store_fd: int, trust: Trusted) -> bool:
    """Whether `signoffs_key` of snapshot `name` in `store` (open as `store_fd`) is still `key`: one system call for a
    snapshot with no records (100,000 a listing: relative to the store's descriptor, no path walked from the root)."""
    folder = f"{name}/{layout.SIGNOFFS_DIR}"
    if key == "-":  # no `signoffs/`: an existence test that raises nothing
        return not os.access(folder, os.F_OK, dir_fd=store_fd, follow_symlinks=False)
    if key.startswith("empty|"):
        try:
            return key == _empty_key(os.lstat(folder, dir_fd=store_fd))
        except OSError:
            return False
    return signoffs_key(f"{store}/{name}/", trust) == key


class Judgement(NamedTuple):
    """The sign-offs column, the signers a `--signed-by` matches, and until when that holds."""

    signoffs: str
    signers: tuple[str, ...]
    until: float | None
    """When it may stop holding (epoch seconds); None: never (no signature was judged against the allowed signers)."""


_RANK = {"valid": 0, "unverified": 1, "unsigned": 2, "invalid": 3, "revoked": 4}


def judge_now(snapshot: Path, trusted: Trusted) -> tuple[str, Judgement]:
    """The sign-offs of `snapshot` as they are now (`analysis.signoffs.judge_signoffs`, as verify judges them), and the
    key they were judged under (`signoffs_key`, taken first: a record added meanwhile changes it)."""
    key = signoffs_key(f"{snapshot}/", trusted)
    if key == "-" or key.startswith("empty|"):  # no record to judge
        return key, Judgement("-", (), None)
    from genrun.analysis.signoffs import judge_signoffs

    now, trust = time.time(), trusted()
    statuses = judge_signoffs(snapshot, trust.path)
    if not statuses:
        return key, Judgement("-", (), None)
    signers = tuple(dict.fromkeys(s.by for s in statuses if s.by and s.state == "valid" and s.decision != "revoke"))
    shown = sorted(statuses, key=lambda s: (s.decision == "revoke", _RANK[s.state]))  # those that hold first: a cut keeps them
    until = trust.until(now) if trust.path is not None and any(s.state in ("valid", "invalid") for s in statuses) else None
    return key, Judgement(", ".join(map(_summary, shown)), signers, until)


def _summary(status: "SignoffStatus") -> str:
    label = f"{status.decision or status.file} {status.state}"
    if status.state == "invalid":
        return f"{label}: {status.reason.split(':')[0].split(' (')[0]}"
    return label if status.state == "revoked" else f"{label} ({status.by})"

