"""verify's `lineage` check: a rerun child's `lineage.json` parses, is frozen, and its parent (when present) is the one recorded."""

from pathlib import Path

from genrun.schemas import layout
from genrun.schemas.digests import sha256_bytes
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot
from .lineage import describe_changes


def check_lineage(snap: Snapshot, ctx: CheckContext) -> Finding:
    """A rerun's `lineage.json` is frozen with the plan, and the parent it names still has the recorded snapshot digest."""
    name = "lineage"
    if layout.LINEAGE not in snap.files:
        return skip(name, "not a rerun (no lineage.json)")
    lineage = snap.lineage
    if lineage is None:
        return Finding(name=name, status="FAIL", message="lineage.json does not parse as a Lineage", examined=Examined(files=1))
    if snap.frozen_manifest is None or layout.LINEAGE not in snap.frozen_manifest:
        return Finding(name=name, status="FAIL", message="lineage.json is not covered by frozen-sha256.txt: it was added after planning",
                       examined=Examined(files=1))
    evidence = {"parent_id": lineage.parent_id, "parent_path": lineage.parent_path, "changes": describe_changes(lineage.changes),
                "allow_changed": lineage.allow_changed, "changed_since_parent": list(lineage.changed_since_parent)}
    manifest = Path(lineage.parent_path) / layout.MANIFEST
    allowed = f"; ran with --allow-changed: {'; '.join(lineage.changed_since_parent)}" if lineage.changed_since_parent else ""
    if not manifest.is_file():
        return Finding(name=name, status="PASS", evidence=evidence, examined=Examined(files=1),
                       message=f"rerun of {lineage.parent_id} ({describe_changes(lineage.changes)}); the parent is not at "
                               f"{lineage.parent_path} to compare digests{allowed}")
    try:
        actual = sha256_bytes(SnapshotDir(lineage.parent_path).read_bytes(layout.MANIFEST))
    except ArtifactError as exc:
        return Finding(name=name, status="WARN", evidence=evidence, examined=Examined(files=1),
                       message=f"the parent's {layout.MANIFEST} at {lineage.parent_path} cannot be read: {exc.reason}")
    evidence["parent_snapshot_digest_now"] = actual
    if actual != lineage.parent_snapshot_digest:
        return Finding(name=name, status="WARN", evidence=evidence, examined=Examined(files=2),
                       message=f"the snapshot at {lineage.parent_path} is not the parent this rerun was made from "
                               f"(digest {actual[:12]}… != recorded {lineage.parent_snapshot_digest[:12]}…)")
    return Finding(name=name, status="PASS", evidence=evidence, examined=Examined(files=2),
                   message=f"rerun of {lineage.parent_id} ({describe_changes(lineage.changes)}), parent digest matches{allowed}")
