"""Whole-file comparison for `diff`: every file's actual bytes, and each side against its own manifest.

A copy of a snapshot with a file changed or added keeps the original manifest, so comparing the
two manifests alone would call them identical; the bytes on disk are what differ.
"""

from genrun.schemas import layout

from ._load import Snapshot

DERIVED = (layout.MANIFEST, layout.FROZEN_MANIFEST)
"""Digests of the other files: they differ exactly when those do, so they are not listed again."""
# run-log.ndjson: what libraries printed, with times (a cached hash or a warm import prints less)
VOLATILE_FILES = (layout.PROGRESS, layout.RESULT, layout.DETERMINISM, layout.ENVIRONMENT, layout.MODEL, layout.TOKEN_BUDGET,
                  layout.RUN_LOG)
"""Files that two faithful runs write differently (clock readings, free memory, how a hash was obtained);
`diff` compares what matters in them field by field (result, environment, model digest)."""


def actual_digests(snap: Snapshot) -> dict[str, str]:
    """path -> sha256 of the bytes on disk (the snapshot must be read with `hash_files=True`)."""
    return {rel: fact.sha256 for rel, fact in snap.files.items() if fact.sha256 is not None and rel not in DERIVED}


def unverified_files(snap: Snapshot) -> tuple[str, ...]:
    """Files that disagree with the snapshot's own manifest: changed, added after sealing, or missing."""
    if snap.manifest is None:
        return ()
    actual = actual_digests(snap)
    listed = {rel: digest for rel, digest in snap.manifest.items() if rel not in DERIVED}
    changed = [f"{rel} (changed)" for rel in listed if rel in actual and actual[rel] != listed[rel]]
    added = [f"{rel} (not in the manifest)" for rel in actual if rel not in listed]
    missing = [f"{rel} (missing)" for rel in listed if rel not in actual]
    return (*sorted(changed), *sorted(added), *sorted(missing))


PROVENANCE_FILES = (layout.LINEAGE,)
"""How a snapshot came about rather than what it ran, with the request source (`request.source.<ext>`): a rerun child
holds a lineage (`diff` shows it as the Lineage verdict) and a JSON source written from its parent's request, where the
parent may hold the user's TOML; the request both describe is compared as `request.json` (the normalized request)."""

VOLATILE_REASON = "written differently by every run (compared field by field above)"
PROVENANCE_REASON = "recording how each snapshot was made (the request itself is compared as request.json, a rerun by its verdict)"
"""Why a file is set aside, worded to follow "Files " (`diff` prints `Files <reason>: <paths>`)."""


def set_aside(added: tuple[str, ...], removed: tuple[str, ...], changed: tuple[str, ...]) -> dict[str, str]:
    """Differing files that do not make two snapshots differ -> why: provenance (on one side only or changed), and
    `VOLATILE_FILES` changed on both sides (on one side only they still count: one snapshot lacks what the other wrote)."""
    found = {rel: PROVENANCE_REASON for rel in (*added, *removed, *changed) if is_provenance(rel)}
    found.update({rel: VOLATILE_REASON for rel in changed if rel in VOLATILE_FILES})
    return dict(sorted(found.items()))


def is_provenance(rel: str) -> bool:
    """A `PROVENANCE_FILES` file or the request source."""
    return rel in PROVENANCE_FILES or layout.is_request_source(rel)
