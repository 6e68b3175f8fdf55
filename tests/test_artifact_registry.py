"""The artifact registry (`genrun.schemas.artifacts`): every file that real sealed snapshots hold is in it and in
the generated format document, its model reads the file, and a backend can add entries without editing it.

The snapshots are the real ones: every bundled example (`examples/*.toml`) run once through the in-process CLI,
a rerun child and a signed sign-off of one of them, the bundled sweep (`examples/sweep/countdowns.toml`), and the
committed format fixtures (`tests/fixtures/format-*`, sweep included), all made once for this module.
"""

import subprocess
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest
from pydantic import BaseModel

from conftest import EXAMPLES, REPO, run_cli
from genrun.schemas import GenerationConfigBeforeGenerate, Signoff, layout
from genrun.schemas.artifacts import (
    SNAPSHOT_ARTIFACTS,
    SWEEP_ARTIFACTS,
    ArtifactSpec,
    artifact_for,
    model_for,
    with_declared,
)
from genrun.schemas.format_doc import render_format_doc

FIXTURES = REPO / "tests" / "fixtures"


class Sealed(NamedTuple):
    """Sealed run snapshots and sweep snapshots to check, each with how it was made."""

    runs: dict[str, Path]
    sweeps: dict[str, Path]


def _files(snapshot: Path) -> list[str]:
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Sealed:
    store = tmp_path_factory.mktemp("registry-store")
    runs: dict[str, Path] = {}
    for example in sorted(EXAMPLES.glob("*.toml")):
        proc = run_cli("run", example, "--store", store / example.stem, "--json")
        assert proc.returncode == 0, f"{example.name}: {proc.stderr}"
        runs[example.name] = Path(orjson.loads(proc.stdout)["snapshot"])
    tiny = runs["tiny.toml"]
    proc = run_cli("rerun", tiny, "--set", "generation.max_new_tokens=4", "--store", store / "rerun", "--json")
    assert proc.returncode == 0, proc.stderr
    (runs["rerun child of tiny.toml"],) = (store / "rerun").iterdir()
    key = store / "owner-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner", "-f", str(key)], check=True)
    proc = run_cli("signoff", tiny, "--decision", "accept", "--by", "owner@example.com", "--key", key)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("sweep", EXAMPLES / "sweep" / "countdowns.toml", "--store", store / "sweep", "--json")
    assert proc.returncode == 0, proc.stderr
    (sweep_dir,) = (p for p in (store / "sweep").iterdir() if (p / layout.SWEEP_PLAN).is_file())
    proc = run_cli("signoff", sweep_dir, "--decision", "accept", "--by", "owner@example.com", "--key", key)
    assert proc.returncode == 0, proc.stderr
    sweeps: dict[str, Path] = {}
    for root in (store / "sweep", FIXTURES):
        for directory in sorted(manifest.parent for manifest in root.rglob(layout.MANIFEST)):
            label = directory.relative_to(root.parent).as_posix()
            (sweeps if (directory / layout.SWEEP_PLAN).is_file() else runs)[label] = directory
    return Sealed(runs, sweeps)


def test_every_bundled_example_was_checked(sealed: Sealed) -> None:
    assert {p.name for p in EXAMPLES.glob("*.toml")} <= set(sealed.runs)
    assert [name.split("/")[0] for name in sealed.sweeps] == ["sweep", "fixtures"], "the bundled sweep and the format-2 sweep"
    assert sum(name.startswith("fixtures/format-") for name in sealed.runs) >= 10, "every committed format fixture"
    assert all((path / layout.MANIFEST).is_file() for path in (*sealed.runs.values(), *sealed.sweeps.values()))
    for signed in (sealed.runs["tiny.toml"], sealed.sweeps[next(iter(sealed.sweeps))]):
        assert any(rel.endswith(".json.sig") for rel in _files(signed)), f"{signed} holds a signed sign-off"
    assert (sealed.runs["rerun child of tiny.toml"] / layout.LINEAGE).is_file()


@pytest.mark.parametrize("kind", ["runs", "sweeps"])
def test_every_written_file_is_registered_and_documented(sealed: Sealed, kind: str) -> None:
    registry = SNAPSHOT_ARTIFACTS if kind == "runs" else SWEEP_ARTIFACTS
    doc = render_format_doc()
    unregistered, undocumented = [], []
    for label, snapshot in getattr(sealed, kind).items():
        for rel in _files(snapshot):
            spec = artifact_for(rel, registry)
            if spec is None:
                unregistered.append(f"{label}: {rel}")
            elif f"| `{spec.name}` |" not in doc:
                undocumented.append(f"{label}: {rel} ({spec.name})")
    assert not unregistered, f"files no registry entry names: {unregistered}"
    assert not undocumented, f"registered files the format document does not list: {undocumented}"


def test_each_registered_model_reads_its_files(sealed: Sealed) -> None:
    """`model_for(file)` is the model that validates it (every line, for event streams)."""
    checked: set[str] = set()
    for registry, snapshots in ((SNAPSHOT_ARTIFACTS, sealed.runs), (SWEEP_ARTIFACTS, sealed.sweeps)):
        for snapshot in snapshots.values():
            for rel in _files(snapshot):
                spec = artifact_for(rel, registry)
                assert spec is not None
                data = (snapshot / rel).read_bytes()
                if spec.form == "json":
                    spec.adapter.validate_json(data)
                elif spec.form == "ndjson":
                    for line in data.splitlines():
                        spec.adapter.validate_json(line)
                else:
                    continue
                checked.add(spec.name)
    assert {f"{layout.SIGNOFFS_DIR}/*.json", layout.LINEAGE, layout.WORKER_MODEL, layout.SWEEP_RESULT, layout.PROGRESS} <= checked


def test_every_name_in_the_format_module_has_an_entry() -> None:
    """A file name added to `layout` without a registry entry (so without a document line) fails here."""
    everything = (*SNAPSHOT_ARTIFACTS, *SWEEP_ARTIFACTS)
    names = {key: value for key, value in vars(layout).items() if key.isupper() and isinstance(value, str) and key != "PLANNING_PREFIX"}
    assert names, "layout's name constants were not found"
    for key, value in names.items():
        if key.endswith("_DIR"):
            found = any(spec.name.startswith(f"{value}/") for spec in everything)
        else:
            found = artifact_for(f"{value}.toml" if key.endswith("_PREFIX") else value, everything) is not None
        assert found, f"layout.{key} = {value!r} has no entry in genrun.schemas.artifacts"


def test_families_and_lookups() -> None:
    assert artifact_for("generation-config.before-generate.3.json").name == "generation-config.before-generate.<i>.json"
    assert artifact_for(layout.GENERATION_CONFIG).name == layout.GENERATION_CONFIG
    assert model_for("generation-config.before-generate.12.json") is GenerationConfigBeforeGenerate
    assert model_for("signoffs/20261201T150431Z-accept-8abc6ac0.json") is Signoff
    assert artifact_for("signoffs/20261201T150431Z-accept-8abc6ac0.json.sig").form == "bytes"
    assert artifact_for("request.source.toml").form == "source" and artifact_for("request.source.yaml") is None
    assert artifact_for("outputs/image_0.png").name == "outputs/" and artifact_for("outputs") is None
    assert model_for(layout.TOKEN_IDS) is None and model_for("not-a-genrun-file.json") is None
    assert artifact_for(layout.SWEEP_PLAN) is None and artifact_for(layout.SWEEP_PLAN, SWEEP_ARTIFACTS).phase == "plan"
    assert artifact_for(layout.DISK_RESERVE).transient
    names = [spec.name for registry in (SNAPSHOT_ARTIFACTS, SWEEP_ARTIFACTS) for spec in registry]
    assert len(names) == len(set(names)) + 4  # the two manifests and the sign-offs are in both kinds of snapshot
    assert all(artifact_for(spec.example) is spec for spec in SNAPSHOT_ARTIFACTS), "entries must not shadow one another"


class CounterCalls(BaseModel):
    """A backend's own call record (stands in for what a third-party backend declares)."""

    schema_version: int = 1
    steps: int


def test_a_backend_adds_its_artifacts_without_editing_the_registry() -> None:
    calls = ArtifactSpec("counter-calls.json", "execute", "The counter's calls.", ("counter",), "json", CounterCalls, schema="counter-calls")
    frames = ArtifactSpec("counter-frames/", "execute", "One file per counted frame.", ("counter",), "bytes")
    merged = with_declared(SNAPSHOT_ARTIFACTS, (calls, frames), "backend 'counter'")
    assert artifact_for("counter-calls.json", merged) is calls and model_for("counter-calls.json", merged) is CounterCalls
    assert artifact_for("counter-frames/0.bin", merged) is frames
    assert artifact_for("counter-calls.json") is None, "the core list is unchanged"
    phases = [spec.phase for spec in merged]
    assert phases == sorted(phases, key=["plan", "execute", "seal", "sign-off"].index), "declared entries keep the written order"
    assert merged.index(calls) < merged.index(artifact_for(layout.MANIFEST))


@pytest.mark.parametrize(("spec", "message"), [
    (ArtifactSpec(layout.RESULT, "execute", "x", ("counter",), "bytes"), "'result.json' already names those files"),
    (ArtifactSpec("outputs/counter.txt", "execute", "x", ("counter",), "bytes"), "'outputs/' already names those files"),
    (ArtifactSpec("generation-config.before-generate.<i>.json", "execute", "x", ("counter",), "bytes"), "already names"),
    (ArtifactSpec("counter.json", "execute", "x", ("counter",), "json", CounterCalls, schema="result"), "schema 'result', which is taken"),
])
def test_a_backend_cannot_claim_a_core_file(spec: ArtifactSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        with_declared(SNAPSHOT_ARTIFACTS, (spec,), "backend 'counter'")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"phase": "later"}, "phase 'later' is not one of"),
    ({"form": "json"}, "form 'json' needs a model"),
    ({"form": "bytes", "model": CounterCalls}, "takes no model"),
    ({"written_by": ()}, "written_by is empty; name the backend"),
    ({"name": "../escape.json"}, "must be a relative path inside the snapshot"),
])
def test_bad_declarations_name_the_field_and_the_fix(kwargs: dict, message: str) -> None:
    fields = {"name": "counter.bin", "phase": "execute", "meaning": "x", "written_by": ("counter",), "form": "bytes", "model": None, **kwargs}
    with pytest.raises(ValueError, match=message):
        ArtifactSpec(**fields)

