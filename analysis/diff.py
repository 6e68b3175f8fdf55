"""`diff`: what differs between two snapshots — request, effective config, environment, code and
model identities, stop reasons, counts, and the first diverging token of each sequence."""

from array import array
from collections.abc import Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict

from genrun.schemas import CodeIdentity, CodeSet, GenerationConfigBeforeGenerate, Result, Versioned, layout

from ._diff_files import actual_digests, set_aside, unverified_files
from ._diffing import Change, diff_values
from ._load import Snapshot, read_snapshot
from ._verdict import LineageVerdict

NOT_COMPARED: Mapping[type[BaseModel], Mapping[str, str]] = MappingProxyType({
    Versioned: MappingProxyType({"schema_version": "every artifact is migrated to the current format on load"}),
    Result: MappingProxyType({
        "timings": "wall-clock: differs on every run",
        "peak_memory": "measured: differs on every run",
        "units_per_s": "a rate over wall-clock time",
        "units_per_s_per_row": "a rate over wall-clock time",
        "execution_identity": "the code, model and plan digests are compared in their own sections",
        "outputs": "compared by content in `outputs`",
    }),
    GenerationConfigBeforeGenerate: MappingProxyType({"call_index": "the section key (`call_<i>`)"}),
})
"""Model -> fields `diff` leaves out on purpose, and why. Every other field, including any added later, is compared."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class FieldChange(_Model):
    """One differing value; `*_absent` when a side lacks the key."""

    path: str
    a: Any
    b: Any
    a_absent: bool = False
    b_absent: bool = False


class FileSetChange(_Model):
    """Differences between two hashed file sets (code, model, outputs)."""

    digest_a: str | None
    digest_b: str | None
    added: tuple[str, ...]
    """In B only."""
    removed: tuple[str, ...]
    """In A only."""
    changed: tuple[str, ...]
    """In both, with different sha256."""

    @property
    def differs(self) -> bool:
        """Any difference at all."""
        return self.digest_a != self.digest_b or bool(self.added or self.removed or self.changed)

    def counted(self, set_aside: Collection[str]) -> "FileSetChange | None":
        """This change without the `set_aside` paths (digests dropped); `None` when nothing else differs."""
        keep = lambda paths: tuple(p for p in paths if p not in set_aside)  # noqa: E731
        rest = FileSetChange(digest_a=None, digest_b=None, added=keep(self.added), removed=keep(self.removed), changed=keep(self.changed))
        return rest if rest.differs else None


class SequenceDiff(_Model):
    """One row compared across the two snapshots."""

    index: int
    reason_a: str | None
    reason_b: str | None
    count_a: int | None
    count_b: int | None
    first_divergence: int | None
    """Index of the first differing generated token (a prefix ends where the shorter row ends); `None` when identical or unknown."""
    identical: bool
    """Same ids, same length."""


class SnapshotDiff(_Model):
    """Everything `genrun diff A B` reports."""

    a: str
    b: str
    request: tuple[FieldChange, ...]
    effective_config: tuple[FieldChange, ...]
    """Per generate call (the `generation_config` kind): `call_<i>.effective.*`, `call_<i>.limit_sources.*`, prompt length, EOS,
    pad; otherwise the declared call-config artifact, under the section its model names (`call_config.*` by default)."""
    environment: tuple[FieldChange, ...]
    code: dict[str, FileSetChange]
    """`genrun`, `entrypoint`, `remote_code` sets that differ."""
    model: FileSetChange | None
    """`None` when both models are identical."""
    result: tuple[FieldChange, ...]
    sequences: tuple[SequenceDiff, ...]
    """At most `SEQUENCES_LISTED` rows, those that differ first (then by index)."""
    outputs: FileSetChange | None
    """Files under `outputs/` (digests from each manifest); `None` when identical or unsealed."""
    files: FileSetChange | None = None
    """Every file by the sha256 of its bytes on disk (manifests aside); `None` when all are the same."""
    files_set_aside: dict[str, str] = {}
    """Files in `files` whose difference does not make the snapshots differ -> why (written differently by every run
    and compared field by field, or provenance such as a rerun's lineage and request source)."""
    unverified: dict[str, tuple[str, ...]] = {}
    """`a` / `b` -> files that no longer match that snapshot's own manifest (changed, added, missing)."""
    lineage: LineageVerdict | None = None
    """When one snapshot was rerun from the other: what the difference proves (see `genrun rerun`)."""
    sequences_not_listed: int = 0
    """Rows compared but left out of `sequences` (beyond `SEQUENCES_LISTED`)."""

    @property
    def identical(self) -> bool:
        """Nothing differs in any section (timings are not compared)."""
        files_differ = bool(self.files and self.files.counted(self.files_set_aside))
        return not (self.request or self.effective_config or self.environment or self.code or self.model or self.result
                    or self.outputs or files_differ or self.unverified
                    or any(not s.identical or s.reason_a != s.reason_b for s in self.sequences))


def diff_snapshots(a: str | Path, b: str | Path) -> SnapshotDiff:
    """Compare two snapshots (read-only; every file is hashed, so a changed copy is not mistaken for its original)."""
    return diff_loaded(read_snapshot(a), read_snapshot(b))


SEQUENCES_LISTED = 1000
"""Rows a diff lists at most: a snapshot can hold a million rows, a report stays readable (and its size bounded)."""


def diff_loaded(a: Snapshot, b: Snapshot) -> SnapshotDiff:
    """The differences between two loaded snapshots."""
    sequences = sorted(_sequences(a, b), key=lambda s: (s.identical and s.reason_a == s.reason_b, s.index))
    return SnapshotDiff(
        a=str(a.path), b=str(b.path),
        request=_changes(a.request_json, b.request_json),
        effective_config=_changes(_configs(a), _configs(b)),
        environment=model_changes(a.environment, b.environment),
        code=_code_changes(a, b),
        model=_fileset(a.model.digest if a.model else None, b.model.digest if b.model else None,
                       _files_of(a.model.files if a.model else ()), _files_of(b.model.files if b.model else ())),
        result=_changes(_result_fields(a), _result_fields(b)),
        sequences=tuple(sequences[:SEQUENCES_LISTED]),
        sequences_not_listed=max(0, len(sequences) - SEQUENCES_LISTED),
        outputs=_outputs(a, b),
        files=(files := _fileset(None, None, actual_digests(a), actual_digests(b))),
        files_set_aside=set_aside(files.added, files.removed, files.changed) if files else {},
        unverified={side: found for side, snap in (("a", a), ("b", b)) if (found := unverified_files(snap))},
        lineage=_lineage(a, b),
    )


def _lineage(a: Snapshot, b: Snapshot) -> LineageVerdict | None:
    """The hook into `lineage.py` (which imports this module, hence the late import)."""
    from .lineage import descent, lineage_verdict

    found = descent(a, b)
    return lineage_verdict(*found) if found is not None else None


def _changes(a: Any, b: Any) -> tuple[FieldChange, ...]:
    return tuple(FieldChange(**c.as_json()) for c in diff_values(a if a is not None else {}, b if b is not None else {}))


def compared_fields(model_type: type[BaseModel]) -> tuple[str, ...]:
    """The model's fields minus the `NOT_COMPARED` ones of it and its bases, in declaration order."""
    skipped = {name for base in model_type.__mro__ for name in NOT_COMPARED.get(base, {})}
    return tuple(name for name in model_type.model_fields if name not in skipped)


def comparable(model: BaseModel | None) -> dict[str, Any]:
    """A model as JSON, field by field (its `compared_fields`); `{}` for a missing one."""
    if model is None:
        return {}
    return model.model_dump(mode="json", include=set(compared_fields(type(model))))


def model_changes(a: BaseModel | None, b: BaseModel | None) -> tuple[FieldChange, ...]:
    """Every compared field (nested values leaf by leaf) that differs between two models of an artifact."""
    return _changes(comparable(a), comparable(b))


def _configs(snap: Snapshot) -> dict[str, Any]:
    configs = {f"call_{c.call_index}": comparable(c) for c in snap.generation_configs}
    if snap.declares("generation_config"):  # the declared call config is call 0 of those, compared above
        return configs
    declared = snap.declaration.call_config
    if snap.call_config is not None:  # genrun's own model: field by field, under the section its model names
        configs[snap.call_config.diff_section] = comparable(snap.call_config)
    elif declared is not None and not declared.read_as_model and isinstance(snap.call_config_json, dict):  # as recorded
        configs["call_config"] = snap.call_config_json
    return configs


def _result_fields(snap: Snapshot) -> dict[str, Any]:
    if snap.result is None:
        return {"status": "no result (incomplete)"}
    return comparable(snap.result)


def _files_of(files: Any) -> dict[str, str]:
    return {f.path: f.sha256 for f in files}


def _fileset(digest_a: str | None, digest_b: str | None, a: dict[str, str], b: dict[str, str]) -> FileSetChange | None:
    change = FileSetChange(digest_a=digest_a, digest_b=digest_b, added=tuple(sorted(set(b) - set(a))), removed=tuple(sorted(set(a) - set(b))),
                           changed=tuple(sorted(p for p in set(a) & set(b) if a[p] != b[p])))
    return change if change.differs else None


def _code_changes(a: Snapshot, b: Snapshot) -> dict[str, FileSetChange]:
    found = {}
    for name in compared_fields(CodeIdentity):
        set_a: CodeSet | None = getattr(a.code, name) if a.code else None
        set_b: CodeSet | None = getattr(b.code, name) if b.code else None
        change = _fileset(set_a.digest if set_a else None, set_b.digest if set_b else None,
                          _files_of(set_a.files if set_a else ()), _files_of(set_b.files if set_b else ()))
        if change is not None:
            found[name] = change
    return found


def _outputs(a: Snapshot, b: Snapshot) -> FileSetChange | None:
    if a.manifest is None or b.manifest is None:
        return None
    prefix = layout.OUTPUTS_DIR + "/"
    pick = lambda m: {p: d for p, d in m.items() if p.startswith(prefix)}  # noqa: E731
    return _fileset(None, None, pick(a.manifest), pick(b.manifest))


def _sequences(a: Snapshot, b: Snapshot) -> list[SequenceDiff]:
    stops_a = {s.index: s for s in a.stop.sequences} if a.stop else {}
    stops_b = {s.index: s for s in b.stop.sequences} if b.stop else {}
    ids_a, ids_b = a.token_ids or {}, b.token_ids or {}
    rows = []
    for index in sorted(set(stops_a) | set(stops_b) | set(ids_a) | set(ids_b)):
        x, y = ids_a.get(index), ids_b.get(index)
        first = first_divergence(x, y) if x is not None and y is not None else None
        identical = x is not None and y is not None and first is None
        if x is None and y is None and index in stops_a and index in stops_b:  # diffusion: compare what was recorded
            identical = stops_a[index].generated == stops_b[index].generated
        count = lambda ids, stops: len(ids) if ids is not None else (stops[index].generated if index in stops else None)  # noqa: E731
        rows.append(SequenceDiff(index=index, reason_a=stops_a[index].reason if index in stops_a else None,
                                 reason_b=stops_b[index].reason if index in stops_b else None, count_a=count(x, stops_a),
                                 count_b=count(y, stops_b), first_divergence=first, identical=identical))
    return rows


def first_divergence(a: array, b: array) -> int | None:
    """First index where the ids differ; where the shorter ends if one is a prefix; `None` when identical. # a, b: [n] int"""
    n = min(len(a), len(b))
    if a[:n] != b[:n]:  # array comparison runs in C; the loop below only runs when they differ
        return next(i for i in range(n) if a[i] != b[i])
    return None if len(a) == len(b) else n
