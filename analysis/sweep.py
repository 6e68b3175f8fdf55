"""`verify SWEEP`: the sweep snapshot's own integrity, every item verified (in parallel), and the distribution.

Read-only, no torch. Sweep-level checks: the sweep is sealed and its files match its manifest;
every attempt of every item still has the item's plan digest; every item's final snapshot still
has the digest `sweep-result.json` recorded; the sweep's own sign-offs (`genrun signoff SWEEP`)
still bind its current digests. Each item's final snapshot then goes through the
same checks as `genrun verify SNAPSHOT`, and the answer counts items per stop reason, per WARN /
FAIL check, per status (lost and failed items named), and units per item (min / median / max).
"""

import os
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from genrun.schemas import layout
from genrun.schemas.digests import sha256_file
from genrun.schemas.result import Result
from genrun.schemas.sweep import SweepPlan, SweepResult
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from ._check_integrity import PLANNED
from ._check_signoffs import signoffs_finding
from ._finding import Examined, Finding, Status
from ._sweep_unlisted import unlisted_attempts
from ._load import SnapshotNotFound

PARALLEL_FROM = 4  # items; below this a process pool costs more than it saves


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ItemVerification(_Model):
    """One item's final snapshot, verified."""

    index: int
    """Item index."""
    snapshot_id: str | None
    """The final attempt's snapshot (`None`: never planned a snapshot to run)."""
    status: str
    """Item status from `sweep-result.json` (or the snapshot's own when the sweep is unsealed)."""
    attempts: int
    """Snapshots tried (lost attempts stay in the store, incomplete)."""
    stop_reasons: tuple[str, ...]
    """Distinct stop reasons of its sequences."""
    generated: int | None
    """Units generated."""
    unit: str | None
    """What `generated` counts."""
    warnings: tuple[str, ...]
    """Checks that warned."""
    failures: tuple[str, ...]
    """Checks that failed."""
    examined: Examined
    """What verifying it examined."""


class Distribution(_Model):
    """How the whole sweep stopped."""

    items: int
    """Items planned."""
    statuses: dict[str, int]
    """Items per status (succeeded, failed, interrupted, lost, not_run)."""
    stop_reasons: dict[str, int]
    """Items per stop reason (an item with two rows stopping differently counts under both)."""
    warn_checks: dict[str, int]
    """Items per check that warned."""
    fail_checks: dict[str, int]
    """Items per check that failed."""
    lost_attempts: int
    """Attempts lost (worker killed mid-item), retried or not; their snapshots are kept incomplete."""
    failed_items: tuple[int, ...]
    """Indices of items that failed."""
    lost_items: tuple[int, ...]
    """Indices of items lost after every retry."""
    units_min: int | None
    units_median: float | None
    units_max: int | None


class SweepVerification(_Model):
    """`genrun verify SWEEP`'s whole answer."""

    sweep: str
    """The sweep directory as given."""
    sweep_id: str
    status: str
    """`completed`, `interrupted`, `planned` (its driver never started: `genrun sweep execute`), or `unsealed` (still
    running, or its driver was killed: `genrun sweep resume`)."""
    findings: tuple[Finding, ...]
    """Sweep-level checks."""
    items: tuple[ItemVerification, ...]
    distribution: Distribution
    examined: Examined
    """Totals over the sweep's own files and every item verified."""

    def exit_code(self, strict: bool = False) -> int:
        """1 on any FAIL (sweep-level or in an item), and on any WARN when `strict`; else 0."""
        failed = any(f.status == "FAIL" for f in self.findings) or any(i.failures for i in self.items)
        warned = any(f.status == "WARN" for f in self.findings) or any(i.warnings for i in self.items)
        return 1 if failed or (strict and warned) else 0


def is_sweep_dir(path: str | Path) -> bool:
    """A sweep snapshot has `sweep-plan.json`."""
    return (Path(path) / layout.SWEEP_PLAN).is_file()


def verify_sweep(path: str | Path, allowed_signers: Path | None = None, *, jobs: int | None = None) -> SweepVerification:
    """Verify the sweep snapshot and every item's final snapshot; `jobs` processes (default: the CPU count)."""
    root = Path(path)
    if not is_sweep_dir(root):
        raise SnapshotNotFound(f"{root} is not a sweep snapshot (no {layout.SWEEP_PLAN})")
    plan = SnapshotDir(root).read(layout.SWEEP_PLAN, SweepPlan)
    result = _read_result(root)
    finals = [(item.index, _final(item, result)) for item in plan.items]
    store = plan.items_store(root, [sid for _, sid in finals if sid])
    paths = [str(store / sid) if sid else None for _, sid in finals]
    workers = jobs or os.cpu_count() or 1
    if len(paths) >= PARALLEL_FROM and workers > 1:
        workers = min(workers, len(paths))
        with ProcessPoolExecutor(max_workers=workers) as pool:  # a few items per round trip: 1,000 items, not 1,000 hand-offs
            verified = list(pool.map(_verify_item_path, paths, [allowed_signers] * len(paths), chunksize=max(1, len(paths) // (workers * 8))))
    else:
        verified = [_verify_item_path(p, allowed_signers) for p in paths]
    items = tuple(_item(plan, result, index, v) for (index, _), v in zip(finals, verified))
    planned = result is None and _never_started(root, items)
    findings = (_check_sealed(root, result, planned), _check_manifest(root, planned), _check_plan_digests(plan, result, store), _check_item_digests(result, store),
                signoffs_finding(root, allowed_signers, name="sweep_signoffs"), _check_item_agreement(root, plan, result, store))
    own = Examined(files=sum(f.examined.files for f in findings))
    examined = Examined(files=own.files + sum(i.examined.files for i in items),
                        token_ids=sum(i.examined.token_ids for i in items),
                        progress_records=sum(i.examined.progress_records for i in items))
    return SweepVerification(sweep=str(root), sweep_id=root.name, status=result.status if result else "planned" if planned else "unsealed",
                             findings=findings,
                             items=items, distribution=_distribution(items, result, plan), examined=examined)


def sweep_summary_line(v: SweepVerification) -> str:
    """`N items: ...; examined X files, Y token ids, Z progress records`."""
    d, e = v.distribution, v.examined
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(d.statuses.items()))
    return (f"{d.items} items ({statuses}); sweep checks: {sum(f.status == 'FAIL' for f in v.findings)} failed; "
            f"examined {e.files} files, {e.token_ids} token ids, {e.progress_records} progress records")


# -- per item -------------------------------------------------------------------------------------


class _Verified(_Model):
    snapshot_id: str | None
    stop_reasons: tuple[str, ...] = ()
    generated: int | None = None
    unit: str | None = None
    own_status: str | None = None
    warnings: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    examined: Examined = Examined()


def _verify_item_path(path: str | None, allowed_signers: Path | None) -> _Verified:
    """Top-level (picklable) so a process pool can run it."""
    from ._load import read_snapshot
    from .verify import verify_loaded

    if path is None:
        return _Verified(snapshot_id=None, failures=("item_snapshot",))
    if not Path(path).is_dir():
        return _Verified(snapshot_id=Path(path).name, failures=("item_snapshot",))
    snap = read_snapshot(path, hash_files=True)
    verification = verify_loaded(snap, allowed_signers)
    stop = snap.stop
    return _Verified(
        snapshot_id=snap.id,
        stop_reasons=tuple(sorted({s.reason for s in stop.sequences})) if stop else (),
        generated=snap.result.generated if snap.result else None,
        unit=snap.result.unit if snap.result else None,
        own_status=snap.result.status if snap.result else None,
        warnings=tuple(f.name for f in verification.findings if f.status == "WARN"),
        failures=tuple(f.name for f in verification.findings if f.status == "FAIL"),
        examined=verification.summary.examined,
    )


def _final(item, result: SweepResult | None) -> str | None:  # noqa: ANN001 (SweepItem)
    if result is not None:
        return result.items[item.index].snapshot_id
    return item.snapshot_id


def _item(plan: SweepPlan, result: SweepResult | None, index: int, v: _Verified) -> ItemVerification:
    outcome = result.items[index] if result is not None else None
    status = outcome.status if outcome is not None else (v.own_status or "not_run")
    failures = v.failures
    if status == "not_run":  # a planned, never-run snapshot is expected to be incomplete; the sweep says why
        failures = ()
    return ItemVerification(index=index, snapshot_id=v.snapshot_id, status=status, attempts=len(outcome.attempts) if outcome else 1,
                            stop_reasons=v.stop_reasons, generated=v.generated, unit=v.unit, warnings=v.warnings, failures=failures,
                            examined=v.examined)


def _distribution(items: tuple[ItemVerification, ...], result: SweepResult | None, plan: SweepPlan) -> Distribution:
    reasons: Counter[str] = Counter(r for i in items for r in i.stop_reasons)
    units = sorted(i.generated for i in items if i.generated is not None)
    lost_attempts = sum(len(o.attempts) - 1 for o in result.items) if result else 0
    lost_attempts += sum(1 for i in items if i.status == "lost")
    return Distribution(
        items=len(plan.items),
        statuses=dict(Counter(i.status for i in items)),
        stop_reasons=dict(reasons),
        warn_checks=dict(Counter(name for i in items for name in i.warnings)),
        fail_checks=dict(Counter(name for i in items for name in i.failures)),
        lost_attempts=lost_attempts,
        failed_items=tuple(i.index for i in items if i.status == "failed"),
        lost_items=tuple(i.index for i in items if i.status == "lost"),
        units_min=units[0] if units else None,
        units_median=statistics.median(units) if units else None,
        units_max=units[-1] if units else None,
    )


# -- sweep-level checks ---------------------------------------------------------------------------


def _read_result(root: Path) -> SweepResult | None:
    return SnapshotDir(root).read_optional(layout.SWEEP_RESULT, SweepResult)


def _never_started(root: Path, items: tuple[ItemVerification, ...]) -> bool:
    """A planned sweep no driver has run: no attempt log, no driver holding its lock, no item run (not even by hand)."""
    from .watch import flock_held

    return (not (root / layout.SWEEP_PROGRESS).exists() and not (root / layout.MANIFEST).exists()
            and flock_held(root / layout.SWEEP_PLAN) is False and all(i.status == "not_run" for i in items))


def _check_sealed(root: Path, result: SweepResult | None, planned: bool) -> Finding:
    name = "sweep_sealed"
    sealed = (root / layout.MANIFEST).is_file()
    if sealed and result is not None:
        status: Status = "PASS" if result.status == "completed" else "WARN"
        return Finding(name=name, status=status, message=f"sealed; the sweep {result.status}", evidence={"status": result.status},
                       examined=Examined(files=2))
    if planned:  # as a planned snapshot: not a failure, its frozen part (the item plans) is checked below
        return Finding(name=name, status="PASS", message=f"{PLANNED}: the item plans are checked below; run it with "
                       f"'genrun sweep execute {root}'", evidence={"planned": True}, examined=Examined(files=2))
    return Finding(name=name, status="FAIL", message="not sealed: the sweep is still running or its driver was killed; "
                   f"finish it with 'genrun sweep resume {root}'", evidence={"sealed": sealed}, examined=Examined(files=2))


def _check_manifest(root: Path, planned: bool) -> Finding:
    name = "sweep_manifest"
    manifest = root / layout.MANIFEST
    if planned:
        return Finding(name=name, status="SKIP", message=f"{PLANNED}: the sweep is sealed when its items have run")
    if not manifest.is_file():
        return Finding(name=name, status="FAIL", message=f"no {layout.MANIFEST}: the sweep's files are not protected")
    try:
        entries = SnapshotDir(root).read_manifest(layout.MANIFEST).entries
    except ArtifactError as exc:
        return Finding(name=name, status="FAIL", message=f"{layout.MANIFEST} {exc.reason}", examined=Examined(files=1))
    changed = sorted(rel for rel, digest in entries.items() if not (root / rel).is_file() or sha256_file(root / rel) != digest)
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    unlisted = sorted(p for p in present - entries.keys() - {layout.MANIFEST} if not p.startswith(f"{layout.SIGNOFFS_DIR}/"))
    examined = Examined(files=len(entries) + 1)
    if changed or unlisted:
        return Finding(name=name, status="FAIL", message=f"sweep files changed or missing: {changed}; not in the manifest: {unlisted}",
                       evidence={"changed": changed, "unlisted": unlisted}, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(entries)} files match {layout.MANIFEST}", examined=examined)


def _check_plan_digests(plan: SweepPlan, result: SweepResult | None, store: Path) -> Finding:
    """Every item snapshot (first try and retries) still carries the plan digest the sweep froze."""
    name = "item_plan_digests"
    wrong = []
    checked = 0
    for item in plan.items:
        for snapshot_id in result.items[item.index].attempts if result is not None else (item.snapshot_id,):
            frozen = store / snapshot_id / layout.FROZEN_MANIFEST
            checked += 1
            if not frozen.is_file() or sha256_file(frozen) != item.plan_digest:
                wrong.append(snapshot_id)
    if wrong:
        return Finding(name=name, status="FAIL", message=f"{len(wrong)} item plan(s) missing or changed since the sweep froze them",
                       evidence={"snapshots": wrong}, examined=Examined(files=checked))
    return Finding(name=name, status="PASS", message=f"{checked} item plans match their frozen plan digests", examined=Examined(files=checked))


def _check_item_digests(result: SweepResult | None, store: Path) -> Finding:
    """Each item's final snapshot still has the digest the sweep recorded when it sealed."""
    name = "item_snapshot_digests"
    if result is None:
        return Finding(name=name, status="SKIP", message="the sweep is not sealed; no item digests recorded yet")
    wrong, checked = [], 0
    for item in result.items:
        if item.snapshot_digest is None or item.snapshot_id is None:
            continue
        manifest = store / item.snapshot_id / layout.MANIFEST
        checked += 1
        if not manifest.is_file() or sha256_file(manifest) != item.snapshot_digest:
            wrong.append(item.snapshot_id)
    if wrong:
        return Finding(name=name, status="FAIL", message=f"{len(wrong)} item snapshot(s) changed since the sweep was sealed",
                       evidence={"snapshots": wrong}, examined=Examined(files=checked))
    return Finding(name=name, status="PASS", message=f"{checked} item snapshots match the digests recorded in {layout.SWEEP_RESULT}",
                   examined=Examined(files=checked))


_SEALED_OUTCOMES = ("succeeded", "failed", "interrupted")


def _check_item_agreement(root: Path, plan: SweepPlan, result: SweepResult | None, store: Path) -> Finding:
    """The sweep's record of each item agrees with the item's own snapshots: a final snapshot sealed with the status the
    sweep records (none for `lost` / `not_run`), no earlier attempt the sweep gave up on sealed `succeeded`, and no
    snapshot of the store that ran an item's plan outside the recorded attempts (the item ran twice: a worker outlived
    its driver, or two drivers ran the sweep)."""
    name = "items_agree"
    if result is None:
        return Finding(name=name, status="SKIP", message="the sweep is not sealed; nothing recorded to compare yet")
    disagreements: list[str] = []
    checked = 0
    for outcome in result.items:
        checked += 1
        expected = outcome.status if outcome.status in _SEALED_OUTCOMES else None
        sealed = _own_status(store / outcome.snapshot_id) if outcome.snapshot_id else None
        refused_before_running = outcome.status == "failed" and sealed is None  # a worker's refusal leaves the plan as it was
        if sealed != expected and not refused_before_running:
            disagreements.append(f"item {outcome.index}: the sweep records {outcome.status}, its snapshot {outcome.snapshot_id} is "
                                 f"{'sealed ' + sealed if sealed else 'not sealed'}")
        for earlier in outcome.attempts[:-1]:
            checked += 1
            status = _own_status(store / earlier)
            if status == "succeeded":
                disagreements.append(f"item {outcome.index}: earlier attempt {earlier}, which the sweep gave up on, is sealed succeeded")
    disagreements += unlisted_attempts(root, plan, result, store)
    if disagreements:
        shown = "; ".join(disagreements[:10]) + (f"; and {len(disagreements) - 10} more" if len(disagreements) > 10 else "")
        return Finding(name=name, status="FAIL", message=f"{len(disagreements)} item(s) disagree with the sweep's record: {shown}",
                       evidence={"disagreements": disagreements[:100]}, examined=Examined(files=checked))
    return Finding(name=name, status="PASS", message=f"{len(result.items)} items agree with the sweep's record", examined=Examined(files=checked))


def _own_status(snapshot: Path) -> str | None:
    """`result.json`'s status of a sealed snapshot; `None` when it has none or it cannot be read."""
    directory = SnapshotDir(snapshot)
    if not directory.has(layout.MANIFEST):
        return None
    try:
        found = directory.read_optional(layout.RESULT, Result)
    except ArtifactError:
        return None
    return found.status if found is not None else None
