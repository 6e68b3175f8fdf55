"""The plugin contract (`genrun.backends`) is complete and the only way between genrun's core and a backend.

- The built-in backends and the shipped example import genrun only through `genrun.backends` (and their own package),
  as a third party must: four real backends prove the public surface.
- The core never imports a backend's package (nor the example): it finds backends through the entry-point group only.
- Two distributions registering one backend name are refused, naming both.
- Everything `genrun.backends` exports is described in its docstring, every required member first among them `name`.
- The stop evidence of the two reasons the core decides is defined once and shared by every backend.
"""

import ast
import re
from pathlib import Path

import pytest

import genrun.backends as public
from genrun.runner.backends import _BACKEND_MEMBERS, installed_backends
from genrun.runner.errors import RequestError

REPO = Path(__file__).resolve().parent.parent
BACKENDS = REPO / "runner" / "backends"
BUILT_IN = ("transformers", "diffusers", "loop", "vllm")
# The folders mapped into the `genrun` package (pyproject's package-dir), source folder -> dotted name.
MAPPED = {REPO / "genrun": "genrun", REPO / "runner": "genrun.runner", REPO / "analysis": "genrun.analysis",
          REPO / "schemas": "genrun.schemas"}


def _module_name(path: Path) -> tuple[str, bool]:
    """`runner/backends/loop/backend.py` -> (`genrun.runner.backends.loop.backend`, False); packages end in `__init__`."""
    for folder, dotted in MAPPED.items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            return ".".join([dotted, *(parts[:-1] if is_package else parts)]), is_package
    raise AssertionError(f"{path} is not in a folder mapped into genrun")


def imported_modules(path: Path, name: tuple[str, bool] | None = None) -> list[tuple[int, str]]:
    """Every module `path` imports (relative imports resolved; `from a import b` also yields `a.b`, which may be a module).

    `name`: the module's dotted name and whether it is a package, for a file outside the folders mapped into genrun."""
    module, is_package = name or _module_name(path)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _private_core_imports(source: Path, own: str, *, probe: bool = False) -> list[str]:
    """Imports of genrun by the package in `source` (dotted name `own`): anything but `genrun.backends` and `own` itself."""
    bad = []
    for path in sorted(source.rglob("*.py")):
        for line, name in imported_modules(path, (own, True) if probe else None):
            if name.split(".")[0] != "genrun" or any(name == a or name.startswith(a + ".") for a in ("genrun.backends", own)):
                continue
            bad.append(f"{path.relative_to(source.parent)}:{line}: {name}")
    return bad


@pytest.mark.parametrize("backend", BUILT_IN)
def test_a_built_in_backend_uses_the_core_only_through_the_plugin_module(backend: str) -> None:
    assert _private_core_imports(BACKENDS / backend, f"genrun.runner.backends.{backend}") == []


def test_the_shipped_example_uses_the_core_only_through_the_plugin_module() -> None:
    assert _private_core_imports(REPO / "genrun" / "examples", "genrun.examples") == []


def test_the_import_scan_refuses_genruns_own_modules_and_the_format_package(tmp_path: Path) -> None:
    """What the scan above flags: a schema name, a runner module, the bare `genrun` package (it is not vacuous)."""
    (tmp_path / "__init__.py").write_text(
        "import genrun\nfrom genrun.schemas import Request\nfrom genrun.runner import budget\nfrom genrun.schemas.stages import Stages\n"
        "from genrun.backends import Request as Public\nfrom . import helpers\nfrom genrun.schemas.stages import LoopCall\n")
    flagged = [entry.split(": ")[1] for entry in _private_core_imports(tmp_path, "my_backend", probe=True)]
    assert flagged == ["genrun", "genrun.schemas", "genrun.schemas.Request", "genrun.runner", "genrun.runner.budget", "genrun.schemas.stages",
                       "genrun.schemas.stages.Stages", "genrun.schemas.stages", "genrun.schemas.stages.LoopCall"]


def test_the_import_scan_sees_relative_and_absolute_imports() -> None:
    """The scan above is not vacuous: it resolves the loop's relative imports into its own package, and reads its
    `genrun.backends` imports."""
    names = {name for _, name in imported_modules(BACKENDS / "loop" / "backend.py")}
    assert {"genrun.backends", "genrun.runner.backends.loop.evidence"} <= names
    names = {name for _, name in imported_modules(BACKENDS / "transformers" / "instrument" / "effective_config.py")}
    assert "genrun.runner.backends.transformers._kv_budget" in names


def test_the_core_imports_no_backends_package() -> None:
    """Outside a backend's own package, nothing of genrun imports it: backends are found through entry points only."""
    packages = (*(f"genrun.runner.backends.{p.name}" for p in BACKENDS.iterdir() if (p / "__init__.py").is_file()), "genrun.examples")
    assert set(packages) >= {f"genrun.runner.backends.{name}" for name in BUILT_IN}
    bad = []
    for folder in MAPPED:
        for path in sorted(folder.rglob("*.py")):
            module, _ = _module_name(path)
            for line, name in imported_modules(path) + _imported_by_name(path):
                owner = next((p for p in packages if name == p or name.startswith(p + ".")), None)
                if owner is not None and not (module == owner or module.startswith(owner + ".")):
                    bad.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert bad == []


def _imported_by_name(path: Path) -> list[tuple[int, str]]:
    """`importlib.import_module("a.b")` calls with a literal name."""
    return [(node.lineno, node.args[0].value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]


def _dist_info(site: Path, dist: str, target: str) -> None:
    folder = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (folder / "entry_points.txt").write_text(f"[genrun.backends]\ncounter = {target}\n")


def test_two_distributions_registering_one_name_are_refused_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _dist_info(tmp_path / "site", "counter-one", "genrun.examples.counter_backend:create_backend")
    _dist_info(tmp_path / "site", "counter-two", "somewhere_else:create_backend")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed_backends.cache_clear()
    try:
        with pytest.raises(RequestError) as refused:
            installed_backends()
    finally:
        monkeypatch.undo()
        installed_backends.cache_clear()
    message = str(refused.value)
    assert "two installed distributions register the backend 'counter'" in message
    assert "counter-one 1.0 (genrun.examples.counter_backend:create_backend)" in message
    assert "counter-two 1.0 (somewhere_else:create_backend)" in message


def test_the_docstring_names_every_required_member_name_first_and_every_export() -> None:
    doc = public.__doc__ or ""
    members = doc[doc.index("every required member"):doc.index("Optional members")]
    positions = {member: members.find(member) for member in _BACKEND_MEMBERS}
    assert all(at >= 0 for at in positions.values()), positions
    assert min(positions, key=positions.__getitem__) == "name"
    assert [n for n in public.__all__ if not re.search(rf"\b{re.escape(n)}\b", doc)] == []


def test_the_docstring_names_the_built_in_backends_and_the_shipped_example() -> None:
    doc = " ".join((public.__doc__ or "").split())
    assert "Four are built in (`transformers`, `diffusers`, `loop`, `vllm`)" in doc
    assert set(BUILT_IN) <= set(installed_backends())
    assert "`genrun.examples.counter_backend`" in doc and "tests/" not in doc
    import genrun.examples.counter_backend as example

    assert isinstance(example.create_backend(), public.Backend)


def test_every_backends_interrupted_and_failed_evidence_is_the_shared_model() -> None:
    from genrun.examples.counter_backend import CounterBackend
    from genrun.runner.backends.loop.backend import LoopBackend
    from genrun.runner.backends.vllm import VllmBackend
    from genrun.runner.backends.diffusers.evidence import DIFFUSION_STOP_EVIDENCE
    from genrun.runner.backends.transformers.evidence import TOKEN_STOP_EVIDENCE

    declared = {"counter": CounterBackend.evidence.stop_evidence, "loop": LoopBackend.evidence.stop_evidence,
                "vllm": VllmBackend.evidence.stop_evidence, "tokens": TOKEN_STOP_EVIDENCE, "diffusion": DIFFUSION_STOP_EVIDENCE}
    for name, models in declared.items():
        by_reason = {model.model_fields["reason"].default: model for model in models}
        assert issubclass(by_reason["interrupted"], public.Interrupted), name
        assert issubclass(by_reason["exception"], (public.Failed, public.FailedWithMessage)), name


def test_a_budget_for_units_that_are_not_tokens_has_no_kv_fields_and_says_so_when_refused() -> None:
    from genrun.schemas import Request

    request = Request.model_validate({"name": "n", "seed": 0, "model": {"path": "m", "backend": "counter", "device": "cpu"},
                                      "budget": {"memory_margin_fraction": 0.0}})
    budget = public.unit_budget(request, unit="step", units=5, rows=2, weight_bytes=10, working_bytes=2**62, force=True,
                                refusals=("a refusal of the backend's own",), units_key="steps")
    assert (budget.units, budget.requested_units, budget.rows_per_request, budget.activation_bytes_estimate) == ("step", 5, 2, 2**62)
    assert (budget.kv_bytes_per_token, budget.kv_bytes_at_budget, budget.context_limit, budget.prompt_tokens) == (None, None, None, None)
    assert budget.forced and budget.refusals[-1] == "a refusal of the backend's own"
    if budget.fits_memory is False:  # /proc/meminfo readable: 4 EiB of working memory never fits
        assert "KV" not in budget.refusals[0] and "activations" in budget.refusals[0]


FORMAT_2 = Path(__file__).parent / "fixtures" / "format-2"


def test_the_runner_of_checks_skips_a_check_whose_evidence_kind_is_undeclared_without_running_it() -> None:
    """A check states the kinds it reads (`CheckSpec.needs`); `run_checks`, not the check, decides that it does not apply."""
    from genrun.analysis import read_snapshot
    from genrun.analysis._context import CheckContext
    from genrun.analysis._tokenizer import DecoderUnavailable
    from genrun.analysis._finding import Examined, Finding
    from genrun.analysis._load import Snapshot
    from genrun.analysis.checks import CHECKS, CheckSpec, run_checks

    ran: list[str] = []

    def needs_ids(snap: Snapshot, ctx: CheckContext) -> Finding:
        ran.append(snap.declaration.backend)
        return Finding(name="ids", status="PASS", message="ran", examined=Examined())

    lm, diffusion = (read_snapshot(FORMAT_2 / name) for name in ("20261201T150421Z-tiny-fd0549", "20261201T150426Z-tiny-diffusion-13bd79"))
    assert lm.declares("token_ids") and not diffusion.declares("token_ids")
    spec = CheckSpec("ids", needs_ids, ("token_ids",))
    (skipped,) = run_checks(diffusion, CheckContext(DecoderUnavailable("not needed")), (spec,))
    assert ran == [] and skipped.status == "SKIP" and "declares no token_ids evidence" in skipped.message
    (passed,) = run_checks(lm, CheckContext(DecoderUnavailable("not needed")), (spec,))
    assert len(ran) == 1 and passed.message == "ran"
    # The kind-specific checks say what they read.
    needs = {c.name: c.needs for c in CHECKS}
    assert needs["token_counts"] == needs["saved_text"] == needs["hidden_cap"] == ("token_ids",)
    assert (needs["diffusion_steps"], needs["stages"], needs["call_evidence"]) == (("diffusion_steps",), ("stages",), ("generation_calls",))


FAMILY_WORDS = re.compile(r"transformers|diffusers|\bloop\b|vllm|pipeline", re.IGNORECASE)
JINJA_LOOP = re.compile(r"\bloop\.(index0?|revindex0?|first|last|length)\b")
"""Jinja's own `loop` variable inside the HTML templates: not a backend."""
FAMILY_NAMES_STILL_IN_ANALYSIS = {
    # a field of `generation-calls.json` (the format): the library version each call ran under
    ("_check_calls.py", "transformers_version"),
    # the library a slow tokenizer needs, named in a message to the user
    ("_tokenizer.py", "transformers"),
}
"""The only family names analysis/ uses in code (outside comments and docstrings), each for the reason given: a field of the
format, a library named to the user. The test below fails on any other, so the list only shrinks."""


def _code_tokens(path: Path) -> list[tuple[int, str]]:
    """Names and string literals of `path`, without comments, docstrings and attribute docstrings."""
    import io
    import tokenize

    tree = ast.parse(path.read_text())
    docs: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            is_text = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
            follows_assignment = i > 0 and isinstance(body[i - 1], (ast.Assign, ast.AnnAssign))
            if is_text and (i == 0 or follows_assignment):
                docs.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            if tok.type in (tokenize.NAME, tokenize.STRING) and tok.start[0] not in docs]


def test_analysis_code_names_no_backend_family_beyond_the_listed_debt() -> None:
    found = {(path.name, word) for path in sorted((REPO / "analysis").glob("*.py")) for _, text in _code_tokens(path)
             for word in re.findall(r"[\w.-]+", JINJA_LOOP.sub("", text)) if FAMILY_WORDS.search(word)}
    assert found - FAMILY_NAMES_STILL_IN_ANALYSIS == set()
    assert FAMILY_NAMES_STILL_IN_ANALYSIS - found == set(), "debt paid: strike it from the list"
    # The scan reads code: the loop backend's package, scanned the same way, is full of its family's name.
    assert any(FAMILY_WORDS.search(text) for _, text in _code_tokens(BACKENDS / "loop" / "backend.py"))


def test_the_plugin_modules_lazy_names_are_the_ones_type_checkers_read() -> None:
    """`genrun.backends` imports a name when it is first used; what runs (`_EXPORTS`) names the same module and attribute as
    the `TYPE_CHECKING` imports type checkers read, and every exported name resolves."""
    tree = ast.parse(Path(public.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING")
    typed = {alias.asname or alias.name: (node.module, alias.name) for node in guarded.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert typed == public._SOURCE
    assert sorted(public.__all__) == sorted(typed)
    assert public.SequenceStop is __import__("genrun.schemas", fromlist=["SequenceStop"]).SequenceStop
    with pytest.raises(AttributeError, match="has no attribute 'NotExported'"):
        public.NotExported  # noqa: B018


def test_genruns_own_evidence_models_are_found_through_its_entry_points_and_by_their_names_before_they_moved() -> None:
    """The core resolves the built-in backends' models through the `genrun.evidence` group (no import of a backend's
    package by name), by the names new snapshots record and by the names snapshots recorded before the models moved."""
    from genrun.runner.backends.diffusers.evidence import EVIDENCE as DIFFUSERS
    from genrun.runner.backends.loop.evidence import EVIDENCE as LOOP
    from genrun.runner.backends.transformers.evidence import EVIDENCE as TRANSFORMERS, EosEvidence
    from genrun.schemas.evidence import MOVED_EVIDENCE_MODELS, builtin_declarations, genrun_evidence_model, qualified_name

    assert dict(builtin_declarations()) == {"diffusers": DIFFUSERS, "loop": LOOP, "transformers": TRANSFORMERS}
    assert genrun_evidence_model("genrun.runner.backends.transformers.evidence:EosEvidence") is EosEvidence
    assert genrun_evidence_model("genrun.schemas.stop_tokens:EosEvidence") is EosEvidence
    assert {old: qualified_name(genrun_evidence_model(old)) for old in MOVED_EVIDENCE_MODELS} == dict(MOVED_EVIDENCE_MODELS)  # type: ignore[arg-type]
    assert genrun_evidence_model("genrun.schemas.stop_tokens:NotAModel") is None
    assert genrun_evidence_model("genrun.examples.counter_backend:CounterCall") is None  # a plugin's: its schema is recorded


def test_a_built_in_call_config_is_listed_in_the_registry_as_its_backend_declares_it_when_first_asked_for() -> None:
    """The artifact registry takes the diffusers call config's name and model from its declaration, and importing the
    registry or the reader loads no backend's evidence (discovery runs when the list is first used)."""
    import subprocess
    import sys

    from genrun.runner.backends.diffusers.evidence import EVIDENCE, PipelineCallBeforeCall
    from genrun.schemas import layout
    from genrun.schemas.artifacts import artifact_for

    spec = artifact_for(layout.PIPELINE_CALL)
    assert spec is not None and spec.model is PipelineCallBeforeCall and spec.written_by == ("diffusers",)
    assert EVIDENCE.call_config_name == layout.PIPELINE_CALL == spec.name  # the name formats 1 and 2 are recognised by
    probe = ("import sys, genrun.schemas.artifacts, genrun.analysis._load\n"
             "print(sorted(m for m in sys.modules if m.startswith('genrun.runner.backends.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_a_third_partys_evidence_entry_point_does_not_make_its_models_genruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only genrun's own distribution is read from `genrun.evidence`: another's models still record their JSON Schema."""
    from genrun.schemas.evidence import _models_by_name, builtin_declarations, genrun_evidence_model

    folder = tmp_path / "site" / "sneaky-1.0.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text("Metadata-Version: 2.1\nName: sneaky\nVersion: 1.0\n")
    (folder / "entry_points.txt").write_text("[genrun.evidence]\ncounter = genrun.examples.counter_backend:CounterBackend.evidence\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    builtin_declarations.cache_clear(), _models_by_name.cache_clear()
    try:
        assert sorted(builtin_declarations()) == ["diffusers", "loop", "transformers"]
        assert genrun_evidence_model("genrun.examples.counter_backend:CounterCall") is None
    finally:
        monkeypatch.undo()
        builtin_declarations.cache_clear(), _models_by_name.cache_clear()
