"""Input checks: did the model receive all the input the request supplied, and are the frozen input files intact?"""

from pathlib import Path
from typing import Any

from genrun.schemas import InputPreparation, PreparedRow, layout
from genrun.schemas.digests import sha256_file

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot

COVERAGE_TOLERANCE_S = 0.05
"""Audio shortfalls below this (a fraction of a feature frame's rounding) are not a loss of input."""


def row_coverage(row: PreparedRow) -> str | None:
    """`received X s of Y s of audio (Z %); who truncated` (or the pixels of a cropped image, or the prompt tokens kept) for a row
    that lost input, else `None`."""
    audio = row.audio
    if audio is not None and audio.input_seconds - audio.seconds_received > COVERAGE_TOLERANCE_S:
        share = 100 * audio.seconds_received / audio.input_seconds
        by = "; ".join(f"{t.component} {_truncated_to(t, audio.seconds_received)}" for t in row.truncations if t.unit != "tokens")
        return (f"the model received {audio.seconds_received:,.1f} s of {audio.input_seconds:,.1f} s of audio ({share:.1f} %)"
                + (f"; {by}" if by else ""))
    cropped = [t for t in row.truncations if t.unit == "pixels"]
    if row.image is not None and cropped:
        return image_coverage(row.image.width, row.image.height, cropped)
    dropped = [t for t in row.truncations if t.unit == "tokens"]
    if dropped:
        t = dropped[0]
        kept = row.prompt_tokens
        return (f"the model received {kept:,} of {kept + int(t.dropped):,} prompt tokens; {t.component} dropped {int(t.dropped):,} "
                f"from the {t.side} ({t.cause})")
    return None


def image_coverage(width: int, height: int, cropped: list) -> str:
    """`received W x H of the supplied W x H pixels (Z %); who cropped what` for an image row a processor cropped."""
    rows, cols = sum(t.rows_dropped or 0 for t in cropped), sum(t.cols_dropped or 0 for t in cropped)
    kept_w, kept_h = width - cols, height - rows
    by = "; ".join(f"{t.component} dropped {t.cols_dropped or 0} column(s) and {t.rows_dropped or 0} row(s) from {t.side} sides ({t.cause})"
                   for t in cropped)
    return (f"the model received {kept_w}x{kept_h} of the supplied {width}x{height} pixels of the image "
            f"({100 * kept_w * kept_h / (width * height):.1f} %); {by}")


def _truncated_to(truncation, received: float) -> str:
    return f"truncated to {received:.0f} s (dropped {truncation.dropped:,.1f} s from the {truncation.side}; {truncation.cause})"


def input_summary(preparation: InputPreparation) -> str | None:
    """One line for the report's first screen: audio seconds received vs supplied over all rows, `None` without audio."""
    audio = [r.audio for r in preparation.rows if r.audio is not None]
    if not audio:
        return None
    supplied = sum(a.input_seconds for a in audio)
    received = sum(a.seconds_received for a in audio)
    return f"audio received {received:,.1f} s of {supplied:,.1f} s supplied ({100 * received / supplied:.1f} %) over {len(audio)} row(s)"


def check_input_coverage(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Every row's model received all the input supplied: no audio seconds, image pixels or prompt tokens dropped by a processor or tokenizer."""
    name = "input_coverage"
    preparation = snap.input_preparation
    if preparation is None:
        return skip(name, "no input-preparation.json (text-only snapshot from an older genrun, or not executed)")
    examined = Examined(files=1)
    lost = {row.row: message for row in preparation.rows if (message := row_coverage(row)) is not None}
    evidence: dict[str, Any] = {f"row_{r.row}": {"seconds_supplied": r.audio.input_seconds if r.audio else None,
                                 "seconds_received": r.audio.seconds_received if r.audio else None,
                                 "prompt_tokens": r.prompt_tokens,
                                 "truncations": [t.model_dump(mode="json") for t in r.truncations]} for r in preparation.rows}
    if lost:
        text = "; ".join(f"row {row}: {message}" for row, message in lost.items())
        return Finding(name=name, status="WARN", message=f"input_coverage: {text}", evidence=evidence, examined=examined)
    summary = input_summary(preparation) or f"all {len(preparation.rows)} row(s) received their whole prompt"
    windows = long_form_windows(snap)
    if windows:
        evidence["long_form_windows"] = windows
        summary += f"; long-form: {len(windows)} sequential window(s) (generate calls), stopped by {', '.join(windows)}"
    return Finding(name=name, status="PASS", message=summary, evidence=evidence, examined=examined)


def long_form_windows(snap: Snapshot) -> list[str]:
    """Stop reasons of each generate call (window) when a row was long-form, in call order; `[]` otherwise."""
    preparation = snap.input_preparation
    if preparation is None or snap.stop is None or not any(r.audio and r.audio.long_form for r in preparation.rows):
        return []
    calls: dict[int, list[str]] = {}
    for stop in snap.stop.sequences:
        calls.setdefault(stop.call_index, []).append(stop.reason)
    return ["/".join(sorted(set(reasons))) for _, reasons in sorted(calls.items())]


def check_input_files(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The frozen media files still match `input-files.json`: copies in `inputs/` by hash, `copy = false` originals re-hashed."""
    name = "input_files"
    files = snap.input_files
    if files is None:
        return skip(name, "the request names no media files")
    changed: list[str] = []
    missing: list[str] = []
    unchecked: list[str] = []
    for item in files.files:
        path = snap.path / item.frozen_path if item.frozen_path is not None else Path(item.source_path)
        if not path.is_file():
            (missing if item.frozen_path is not None else unchecked).append(str(path))
            continue
        if sha256_file(path) != item.sha256:
            changed.append(str(path))
    evidence = {"changed": changed, "missing": missing, "not_reachable": unchecked, "copied": files.copied}
    examined = Examined(files=len(files.files) + 1)
    if changed or missing:
        parts = [f"changed since planning: {', '.join(changed)}" if changed else "", f"missing: {', '.join(missing)}" if missing else ""]
        return Finding(name=name, status="FAIL", message="frozen input files no longer match input-files.json: " + "; ".join(p for p in parts if p),
                       evidence=evidence, examined=examined)
    if unchecked:
        return Finding(name=name, status="WARN", message=f"input files frozen by hash only (copy = false) cannot be re-hashed here: "
                       f"{', '.join(unchecked)} not found", evidence=evidence, examined=examined)
    where = "copies in inputs/" if files.copied else "originals (copy = false)"
    return Finding(name=name, status="PASS", message=f"{len(files.files)} input file(s) match their frozen sha256 ({where})",
                   evidence=evidence, examined=examined)


def check_processor_files(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The frozen `[model] processor` copy in `processor/` still holds exactly the files and sha256s `model.json` recorded."""
    name = "processor_files"
    processor = snap.model.processor if snap.model is not None else None
    if processor is None:
        return skip(name, "the request names no [model] processor (the checkpoint's own was used)")
    prefix = f"{layout.PROCESSOR_DIR}/"
    recorded = {prefix + f.path: f.sha256 for f in processor.files}
    present = {rel: fact for rel, fact in snap.files.items() if rel.startswith(prefix)}
    missing = sorted(rel for rel in recorded if rel not in present)
    changed = sorted(rel for rel, fact in present.items() if rel in recorded and fact.sha256 is not None and fact.sha256 != recorded[rel])
    extra = sorted(rel for rel in present if rel not in recorded)
    evidence = {"recorded": len(recorded), "missing": missing, "changed": changed, "not_recorded": extra, "source": processor.resolved_path}
    examined = Examined(files=len(present) + 1)
    if missing or changed or extra:
        parts = [f"{label}: {', '.join(found)}" for label, found in (("changed", changed), ("missing", missing), ("not in model.json", extra)) if found]
        return Finding(name=name, status="FAIL", message=f"the frozen processor copy no longer matches model.json: {'; '.join(parts)}",
                       evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(recorded)} processor file(s) in {prefix} match model.json "
                   f"(copied from {processor.resolved_path})", evidence=evidence, examined=examined)

