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


def only_volatile_differ(added: tuple[str, ...], removed: tuple[str, ...], changed: tuple[str, ...]) -> bool:
    """Two snapshots whose file sets differ only in `VOLATILE_FILES`."""
    return not added and not removed and all(rel in VOLATILE_FILES for rel in changed)
