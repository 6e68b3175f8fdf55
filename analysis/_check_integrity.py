"""Integrity checks: is the snapshot complete, do its files still match what was hashed?"""

import re
import stat
from collections.abc import Mapping
from typing import Any, NamedTuple

from genrun.schemas import layout
from genrun.schemas.digests import canonical_sha256sum_problem

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import FileFact, Snapshot

INCOMPLETE = "incomplete: the run ended without a result (external termination?)"
_ARTIFACTS = (*layout.FROZEN_FILES, layout.FROZEN_MANIFEST, *layout.EXECUTION_FILES, layout.MANIFEST)
PLANNED = "planned, not executed"
_TERMINAL_EVENTS = ("end", "exception", "interrupted")
NOT_SAVED = ("incomplete: the run ended (last progress record '{event}' at t={t:.3f} s, {generated} {unit}s) but its result was "
             "never saved: sealing failed after generation (a full disk, by bytes or by inodes, or the process killed while "
             "saving; execute printed the reason)")


def is_plan_only(snap: Snapshot) -> bool:
    """A plan that was never executed (the format module's `planned` state)."""
    return snap.state is layout.SnapshotState.PLANNED


def check_completeness(snap: Snapshot, ctx: CheckContext) -> Finding:
    """A finished run has `result.json` and `manifest-sha256.txt`; a plan is a plan; anything else is a FAIL that says how far it got."""
    name = "completeness"
    records = len(snap.progress.events) if snap.progress else 0
    examined = Examined(files=2, progress_records=records)
    if is_plan_only(snap):  # not a failure: its frozen part is checked by plan_digest_chain and the request checks
        return Finding(name=name, status="PASS", message=f"{PLANNED}: the frozen plan is checked below; run it with "
                       f"'genrun execute {snap.path.name}'", evidence={"planned": True}, examined=examined)
    has_result = layout.RESULT in snap.files
    if has_result and snap.is_sealed:
        result = snap.result
        status = result.status if result is not None else "unreadable"
        evidence: dict[str, Any] = {"result_status": status}
        if result is not None and result.status != "succeeded":  # sealed and consistent, but the outputs are partial
            why = f"was interrupted by {result.signal}" if result.status == "interrupted" else (
                f"failed with {result.exception.type}: {result.exception.message}" if result.exception else "failed")
            return Finding(name=name, status="WARN", message=f"sealed, but the run {why} after {result.generated} {result.unit}s: "
                           "the outputs are partial", evidence=evidence, examined=examined)
        return Finding(name=name, status="PASS", message=f"sealed: result.json (status {status}) and manifest-sha256.txt are present",
                       evidence=evidence, examined=examined)
    evidence = {"has_result": has_result, "sealed": snap.is_sealed, "progress_records": records}
    if layout.RESULT in snap.problems and not has_result:  # there, but unreadable: never "ended without a result"
        evidence["result_problem"] = snap.problems[layout.RESULT]
        return Finding(name=name, status="FAIL", evidence=evidence, examined=examined,
                       message=f"{layout.RESULT} is present but {snap.problems[layout.RESULT]}: how the run ended cannot be read")
    last_event = snap.progress.last if snap.progress else None
    if not has_result and last_event is not None and last_event.event in _TERMINAL_EVENTS:
        message = NOT_SAVED.format(event=last_event.event, t=last_event.t, generated=last_event.generated, unit=snap.unit)
        if last_event.event == "exception":
            message += f" (the run's own error: {getattr(last_event, 'type', '?')}: {str(getattr(last_event, 'message', ''))[:200]})"
        evidence.update(last_event=last_event.event, last_seq=last_event.seq, last_t=last_event.t, last_generated=last_event.generated)
    elif not has_result:
        message = INCOMPLETE
        if snap.progress is None:
            present = [f for f in layout.EXECUTION_FILES if f in snap.files]
            if present:
                message += f"; no progress.ndjson: it died before generation started (execution files present: {', '.join(present)})"
            else:
                message += ("; nothing was executed: this is a plan only (run 'genrun execute SNAPSHOT'), "
                            "or the process died before generation started")
        else:
            last = snap.progress.last
            if last is None:
                message += "; progress.ndjson holds no complete record"
            else:
                message += f"; last progress record: seq {last.seq} '{last.event}' at t={last.t:.3f} s, generated {last.generated} {snap.unit}s"
                evidence.update(last_event=last.event, last_seq=last.seq, last_t=last.t, last_generated=last.generated)
            if snap.progress.truncated_tail:
                message += f"; the final line of progress.ndjson is cut off ({snap.progress.truncated_tail})"
                evidence["truncated_tail"] = snap.progress.truncated_tail
        message += _executor_note(snap)
    else:
        message = "incomplete: result.json exists but the snapshot was never sealed (no manifest-sha256.txt); its files are not protected"
    return Finding(name=name, status="FAIL", message=message, evidence=evidence, examined=examined)


def check_artifacts_valid(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Every artifact present parses with its schema model (one pydantic model per file)."""
    name = "artifacts_valid"
    present = [f for f in snap.files if f in _ARTIFACTS or layout.is_request_source(f) or layout.generation_config_call_index(f) is not None]
    examined = Examined(files=len(present))
    problems = dict(sorted(snap.problems.items()))  # by file, whatever order they were read in
    if problems:
        listed = "; ".join(f"{f}: {why}" for f, why in sorted(problems.items()))
        return Finding(name=name, status="FAIL", message=f"{len(problems)} file(s) do not load: {listed}",
                       evidence={"problems": problems}, examined=examined)
    undeclared = undeclared_files(snap)
    if undeclared:
        return Finding(name=name, status="WARN", message=f"{len(present)} artifact files parse with their schemas; {len(undeclared)} file(s) "
                       f"neither genrun's format nor the {snap.declaration.backend!r} backend's declaration names, so nothing checks "
                       f"them: {', '.join(undeclared[:10])}", evidence={"files": sorted(present), "undeclared": undeclared}, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(present)} artifact files parse with their schemas",
                   evidence={"files": sorted(present)}, examined=examined)


def undeclared_files(snap: Snapshot) -> list[str]:
    """Files no entry of the format (`genrun.schemas.artifacts`) and no declaration of the backend names (`outputs/` holds
    anything the run produced)."""
    from genrun.schemas.artifacts import artifact_for

    call_config = snap.declaration.call_config
    declared = {call_config.name} if call_config is not None else set()
    return sorted(f for f in snap.files if f not in declared and artifact_for(f) is None)


def _executor_note(snap: Snapshot) -> str:
    """Whether a process still executes the snapshot (its execution lock), where this machine can tell."""
    from .watch import execution_lock_held

    held = execution_lock_held(snap.path)
    if held is None:
        return ""
    return ("; a process still holds its execution lock: the run may still be going (verify again once it is sealed)" if held
            else "; no process holds its execution lock: the executor is gone and will never seal it")


def check_manifest_integrity(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Every file is listed in `manifest-sha256.txt` with its current sha256; none missing, none extra (`signoffs/` excluded)."""
    name = "manifest_integrity"
    if not snap.is_sealed:
        return skip(name, "no manifest-sha256.txt: the snapshot is not sealed (see completeness)")
    if snap.manifest is None:
        why = snap.problems.get(layout.MANIFEST, "unreadable")
        return Finding(name=name, status="FAIL", message=f"manifest-sha256.txt cannot be used: {why}", examined=Examined(files=1))
    present = {rel: fact for rel, fact in snap.files.items() if rel != layout.MANIFEST}
    missing = sorted(set(snap.manifest) - set(present))
    extra = sorted(set(present) - set(snap.manifest))
    changed = sorted(rel for rel, digest in snap.manifest.items() if rel in present and present[rel].sha256 != digest)
    unhashed = sorted(rel for rel in present if present[rel].sha256 is None)
    examined = Examined(files=len(set(snap.manifest) | set(present)) + 1)  # + the manifest itself
    evidence = {"listed": len(snap.manifest), "present": len(present), "missing": missing, "extra": extra, "changed": changed,
                "snapshot_digest": snap.snapshot_digest}
    if unhashed:
        return skip(name, "files were loaded without hashing (read_snapshot(hash_files=False))", unhashed=unhashed)
    # a line of the manifest itself edited: named as such, and the file it mentions is not blamed for it
    altered = altered_manifest_lines(snap.manifest, present, changed, missing, extra)
    explained = {rel for line in altered for rel in line.covers}
    changed, missing, extra = ([rel for rel in group if rel not in explained] for group in (changed, missing, extra))
    evidence["altered_manifest_lines"] = [line.listed for line in altered]
    problems = [_one_problem(altered)] if altered else []
    folders = {rel: why for rel, why in snap.problems.items() if rel.endswith("/")}  # empty or unlistable directories
    if folders:  # a listed file inside a folder that cannot be listed is unchecked, not missing
        missing = [rel for rel in missing if not any(rel.startswith(folder) for folder in folders)]
        evidence["folders"] = folders
        problems.append(f"{len(folders)} folder(s) not as sealed: " + shorten_list([f"{rel} {why}" for rel, why in sorted(folders.items())]))
    if snap.snapshot_digest is not None and (rewritten := canonical_sha256sum_problem(snap.manifest, snap.snapshot_digest)):
        problems.append(f"{layout.MANIFEST} was altered: {rewritten}")
    if changed:
        problems.append(f"{len(changed)} file(s) changed since sealing: {shorten_list(changed)}")
    if missing:
        problems.append(f"{len(missing)} listed file(s) missing: {shorten_list(missing)}")
    if extra:
        problems.append(f"{len(extra)} file(s) not in the manifest (added after sealing): {shorten_list(extra)}")
    problems += loosened_files(present)
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(snap.manifest)} files hashed, all match the manifest; none missing, none extra",
                   evidence=evidence, examined=examined)


def check_plan_digest_chain(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`frozen-sha256.txt` covers the frozen files and each still matches; the manifest binds the same frozen manifest."""
    name = "plan_digest_chain"
    if snap.frozen_manifest is None or snap.plan_digest is None:  # a readable manifest always has its digest
        why = snap.problems.get(layout.FROZEN_MANIFEST, "missing")
        return Finding(name=name, status="FAIL", message=f"frozen-sha256.txt cannot be used: {why}", examined=Examined(files=1))
    frozen = snap.frozen_manifest

    def digest_of(rel: str) -> str | None:
        fact = snap.files.get(rel)
        if fact is None:
            return None
        return fact.sha256 or frozen.get(rel, "present")  # loaded without hashing: cannot tell, so not reported as changed

    found = layout.check_frozen(frozen, [snap.request_source_name] if snap.request_source_name else [], digest_of)
    not_frozen, gone, changed = list(found.not_frozen), list(found.missing), list(found.changed)
    problems = []
    if snap.request_source_name is None:
        problems.append("no request.source.<ext> (the request bytes as given) in the snapshot")
    if not_frozen:
        problems.append(f"not covered by frozen-sha256.txt: {', '.join(not_frozen)}")
    if gone:
        problems.append(f"frozen file(s) missing: {', '.join(gone)}")
    if changed:
        problems.append(f"frozen file(s) changed after planning: {', '.join(changed)}")
    if snap.plan_digest is not None and (rewritten := canonical_sha256sum_problem(frozen, snap.plan_digest)):
        problems.append(f"{layout.FROZEN_MANIFEST} was altered: {rewritten}")
    if snap.manifest is not None:
        sealed_plan = snap.manifest.get(layout.FROZEN_MANIFEST)
        if sealed_plan is None:
            problems.append("manifest-sha256.txt does not list frozen-sha256.txt, so the plan is not bound to the snapshot digest")
        elif sealed_plan != snap.plan_digest:
            problems.append(f"manifest-sha256.txt binds plan digest {sealed_plan[:12]}…, "
                            f"but frozen-sha256.txt now hashes to {snap.plan_digest[:12]}…")
    evidence = {"plan_digest": snap.plan_digest, "frozen_files": sorted(frozen), "missing": gone, "changed": changed, "not_frozen": not_frozen}
    examined = Examined(files=len(frozen) + 1)
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(frozen)} frozen files match frozen-sha256.txt (plan digest {snap.plan_digest[:12]}…)",
                   evidence=evidence, examined=examined)


def check_execution_identity(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The code, model and plan digests recorded at execution (`result.json`) equal the frozen ones."""
    name = "execution_identity"
    if snap.result is None:
        return skip(name, "no valid result.json: nothing recorded at execution to compare")
    at_run = snap.result.execution_identity
    pairs = {
        "code_digest": (snap.code.genrun.digest if snap.code else None, at_run.code_digest, layout.CODE),
        "model_digest": (snap.model.digest if snap.model else None, at_run.model_digest, layout.MODEL),
        "plan_digest": (snap.plan_digest, at_run.plan_digest, layout.FROZEN_MANIFEST),
    }
    evidence = {key: {"frozen": frozen, "at_execution": run} for key, (frozen, run, _) in pairs.items()}
    problems = []
    for key, (frozen, run, source) in pairs.items():
        if frozen is None:
            problems.append(f"{key}: {source} is missing or invalid, so the frozen value is unknown")
        elif frozen != run:
            problems.append(f"{key} at execution {run[:12]}… differs from the frozen {frozen[:12]}… ({source})")
    examined = Examined(files=4)
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message="code, model and plan digests at execution equal the frozen ones",
                   evidence=evidence, examined=examined)


def check_outputs_listed(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`result.json` `outputs` names exactly the files under `outputs/`."""
    name = "outputs_listed"
    if snap.result is None:
        return skip(name, "no valid result.json")
    prefix = layout.OUTPUTS_DIR + "/"
    on_disk = {rel for rel in snap.files if rel.startswith(prefix)}
    listed = {rel if rel.startswith(prefix) else prefix + rel for rel in snap.result.outputs}
    unlistable = [rel for rel, why in snap.problems.items() if rel.startswith(prefix) and rel.endswith("/") and "cannot be listed" in why]
    missing = sorted(rel for rel in listed - on_disk if not any(rel.startswith(folder) for folder in unlistable))
    unlisted = sorted(on_disk - listed)
    evidence = {"listed": sorted(listed), "missing": missing, "unlisted": unlisted, "unlistable": unlistable}
    examined = Examined(files=len(listed | on_disk))
    if missing or unlisted or unlistable:
        parts = ([f"listed in result.json but absent: {shorten_list(missing)}"] if missing else []) + (
            [f"present but not listed in result.json: {shorten_list(unlisted)}"] if unlisted else []) + (
            [f"{shorten_list(unlistable)} cannot be listed, so its files cannot be compared"] if unlistable else [])
        return Finding(name=name, status="FAIL", message="; ".join(parts), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(listed)} output file(s), all listed in result.json", evidence=evidence, examined=examined)


_LOOSE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH


def loosened_files(present: Mapping[str, FileFact]) -> list[str]:
    """Sealed files whose own state changed without their bytes: made writable by others or setuid/setgid, or hard-linked
    (one more name elsewhere, through which the file can change). An owner's write bit alone is what a copy or a git
    checkout restores, so it is not named."""
    loose = sorted(f"{rel} ({oct(fact.mode)})" for rel, fact in present.items() if fact.mode & _LOOSE_BITS)
    linked = sorted(f"{rel} ({fact.links} links)" for rel, fact in present.items() if fact.links > 1)
    return [message for message in (
        f"{len(loose)} file(s) made writable by others or setuid/setgid since sealing: {shorten_list(loose)}" if loose else "",
        f"{len(linked)} file(s) hard-linked to a name outside the snapshot's control: {shorten_list(linked)}" if linked else "",
    ) if message]


def shorten_list(names: list[str], shown: int = 10) -> str:
    """The first `shown` names and how many more: a finding stays readable whatever a snapshot holds."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


_ALTERED = f"{layout.MANIFEST} was altered: "
_ALTERED_SHOWN = 5


def _one_problem(altered: "list[AlteredLine]") -> str:
    """Every edited manifest line in one problem, the file named once (15 edited lines said it 15 times)."""
    if len(altered) == 1:
        return altered[0].message
    details = [line.message.removeprefix(_ALTERED) for line in altered]
    more = f"; and {len(details) - _ALTERED_SHOWN} more" if len(details) > _ALTERED_SHOWN else ""
    return f"{layout.MANIFEST} was altered in {len(altered)} lines: " + "; ".join(details[:_ALTERED_SHOWN]) + more


class AlteredLine(NamedTuple):
    """A line of `manifest-sha256.txt` that was edited after sealing (not the file it names)."""

    listed: str
    """The path as the manifest lists it."""
    message: str
    covers: tuple[str, ...]
    """Paths whose changed / missing / unlisted entries this edit explains."""


# A changed file changes ~60 of its 64 hex digits; a digest this close to the file's own was edited in the manifest.
# (Two unrelated digests agree in 48 or more digits with a probability below 1e-40.)
_EDITED_DIGITS_AT_MOST = 16
_JOINED_LINE = re.compile(r"([0-9a-f]{64})  (.+)$")


def altered_manifest_lines(manifest: Mapping[str, str], present: Mapping[str, FileFact], changed: list[str],
                           missing: list[str], extra: list[str]) -> list[AlteredLine]:
    """Manifest lines whose digest differs from the file's in a few digits, or that name no file of the snapshot with the
    exact digest of a file the manifest does not list (a flipped byte in a digest or a name)."""
    found = []
    for rel in changed:
        actual = present[rel].sha256 or ""
        digits = sum(a != b for a, b in zip(manifest[rel], actual))
        if digits <= _EDITED_DIGITS_AT_MOST:
            found.append(AlteredLine(rel, f"{_ALTERED}its sha256 for {rel} differs from the file's in {digits} of "
                                          "64 hex digits (a changed file would change about 60)", (rel,)))
    unlisted = {present[rel].sha256: rel for rel in extra}
    for rel in missing:
        twin = unlisted.get(manifest[rel])
        joined = _JOINED_LINE.search(rel)  # `<name>?<sha256>  <next name>`: the newline between two lines was overwritten
        if twin is not None and joined is not None and unlisted.get(joined.group(1)) == joined.group(2):
            found.append(AlteredLine(rel, f"{_ALTERED}its lines for {twin} and {joined.group(2)} run "
                                          "together (the newline between them was overwritten)", (rel, twin, joined.group(2))))
        elif twin is not None:
            found.append(AlteredLine(rel, f"{_ALTERED}it lists {rel!r}, which is not in the snapshot, with the "
                                          f"sha256 of {twin}, which it does not list (a name edited in the manifest, or the file "
                                          "renamed after sealing)", (rel, twin)))
    return found

