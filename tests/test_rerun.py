"""`genrun rerun` and the lineage verdict, through the real CLI (in-process `main`) on local models.

Grouped by concern: reproduction, limits and EOS (proof that a stop was EOS, not the cap), identity refusals,
lineage integrity (the parent is never touched), request-change refusals.
"""

import json
import re
import shutil
from pathlib import Path

import orjson
import pytest

from genrun.schemas import Lineage, layout

from _cli_helpers import cli, run_json, run_request, sealed_run
from _lm_helpers import random_lm, read_ids, read_json, request_text, write_entry_module

pytestmark = pytest.mark.usefixtures("isolated_caches")


def make_parent(capsys, tmp_path: Path, text: str) -> Path:
    return run_request(capsys, tmp_path, text)


def rerun(capsys, parent: Path, *args: str) -> dict:
    return run_json(capsys, "rerun", parent, *args)


@pytest.fixture(scope="module")
def shared_parent(tmp_path_factory: pytest.TempPathFactory, tiny_lm: Path) -> Path:
    """A sealed greedy run that tests only read (children land beside it)."""
    return sealed_run(tmp_path_factory.mktemp("shared-parent"), request_text(tiny_lm, generation={"max_new_tokens": 8}))


def store_entries(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


# -- reproduction ---------------------------------------------------------------------------------


def test_greedy_rerun_unchanged_is_reproduced(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 5 :", generation={"max_new_tokens": 16}))
    done = rerun(capsys, parent, "--note", "same again")
    verdict = done["verdict"]
    assert verdict["kind"] == "reproduced"
    assert verdict["sentence"] == "reproduced: every token id equal (1 row, 6 tokens)"
    child = Path(done["child"])
    assert read_ids(child) == read_ids(parent)
    lineage = Lineage.model_validate_json((child / layout.LINEAGE).read_bytes())
    assert (lineage.parent_id, lineage.changes, lineage.note) == (parent.name, (), "same again")
    assert lineage.parent_snapshot_digest == _sha256(parent / layout.MANIFEST)
    assert child.parent == parent.parent  # the child lands in the parent's store


def test_human_output_says_the_verdict_in_one_sentence(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 16}))
    code, out, err = cli(capsys, "rerun", parent)
    assert code == 0, err
    assert "Verdict: reproduced: every token id equal (1 row, 4 tokens)" in " ".join(out.split())
    assert "succeeded" in err and "planned" in err
    # reading the parent and planning the child happen in this command too: their share comes before execution's
    time, plan = re.search(r"time: plan (\d+\.\d\d) s \+ execute (\d+\.\d\d) s = total (\d+\.\d\d) s\n\s+plan: (.*)", err).group(1, 4)
    assert [name for name, _ in re.findall(r"([a-z]+) (\d+\.\d\d) s", plan)] == ["checks", "imports", "hashing", "budget", "environment", "freeze"]
    assert sum(float(v) for _, v in re.findall(r"([a-z]+) (\d+\.\d\d) s", plan)) == pytest.approx(float(time), abs=0.03)


def test_rerun_prints_paths_as_run_does_and_each_rows_text(capsys, tmp_path: Path, tiny_lm: Path, monkeypatch) -> None:
    """Relative to the current directory (like `run`), with a short escaped excerpt of what each row generated."""
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 16}))
    monkeypatch.chdir(tmp_path)
    before = {p.name for p in parent.parent.iterdir()}
    code, out, err = cli(capsys, "rerun", parent, "--quiet")
    assert code == 0, err
    assert err == ""  # --quiet: no plan summary, bar, library notice or summary
    (quiet_child,) = [p for p in parent.parent.iterdir() if p.name not in before and p.is_dir()]
    assert out == f"{quiet_child.relative_to(tmp_path).as_posix()}\n"  # the child alone on stdout (no verdict): what a script takes
    before = {p.name for p in parent.parent.iterdir()}
    code, out, err = cli(capsys, "rerun", parent)
    assert code == 0, err
    # Not the last by name: two reruns in one second differ only by their random suffix.
    (child,) = [p for p in parent.parent.iterdir() if p.name not in before and p.is_dir()]
    shown = child.relative_to(tmp_path).as_posix()
    assert f"planned {shown} " in err and f"succeeded: {shown}" in err and str(tmp_path) not in err
    (lineage,) = [line for line in out.splitlines() if line.startswith("Lineage: ")]  # one line, both paths whole
    assert f"Lineage: {shown} was rerun from {parent.relative_to(tmp_path).as_posix()} (" in lineage and str(tmp_path) not in out
    text = (child / layout.sequence_text_path(0)).read_text()
    assert repr(text[:60]) in err  # escaped: a newline shows as \\n and can never move the cursor


def test_a_lowered_limit_says_the_child_was_cut_not_that_it_diverged(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    """The child is the parent's first tokens, cut by its own lower max_new_tokens: nothing diverged."""
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 12 :", generation={"max_new_tokens": 64}))
    code, out, err = cli(capsys, "rerun", parent, "--set", "generation.max_new_tokens=4")
    assert code == 0, err
    verdict = " ".join(out.split())
    assert ("Verdict: row 0 was cut by the child's max_new_tokens = 4 after 4 tokens, each equal to the parent's "
            "(the parent went on to 13 tokens, stopped by eos)") in verdict, verdict
    assert "diverged" not in verdict


@pytest.fixture(scope="module")
def noisy_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Llama without EOS: sampled ids are noise, so two seeds differ early."""
    return random_lm(tmp_path_factory.mktemp("noisy") / "lm")


def test_sampled_run_same_seed_reproduced_other_seed_diverges(capsys, tmp_path: Path, noisy_lm: Path) -> None:
    text = request_text(noisy_lm, generation={"max_new_tokens": 24, "do_sample": True, "top_k": 0})
    parent = make_parent(capsys, tmp_path, text)
    assert read_json(parent, layout.DETERMINISM)["sampling"] is True
    same = rerun(capsys, parent)["verdict"]
    assert same["kind"] == "reproduced", same["sentence"]

    other = rerun(capsys, parent, "--set", "seed=7")
    verdict = other["verdict"]
    ids_p, ids_c = read_ids(parent)["sequence_0"], read_ids(Path(other["child"]))["sequence_0"]
    k = next(i for i, (x, y) in enumerate(zip(ids_p, ids_c)) if x != y)
    assert verdict["kind"] == "diverged"
    row = verdict["rows"][0]
    assert (row["first_divergence"], row["parent_token_id"], row["child_token_id"]) == (k, ids_p[k], ids_c[k])
    assert verdict["sentence"].startswith(f"diverged at token {k} of row 0 (with seed 0 -> 7): parent id {ids_p[k]}, child id {ids_c[k]}")
    assert "determinism.seed 0 -> 7" in verdict["sentence"]  # the recorded difference that explains it
    assert other["lineage"]["changes"] == [{"key": "seed", "action": "set", "parent_value": 0, "parent_absent": False,
                                            "child_value": 7, "child_absent": False}]


# -- limits and EOS -------------------------------------------------------------------------------


def test_run_cut_by_max_new_tokens_rerun_with_a_larger_limit_goes_past(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 40 :", generation={"max_new_tokens": 16}))
    done = rerun(capsys, parent, "--set", "generation.max_new_tokens=64", "--note", "EOS or cap?")
    verdict = done["verdict"]
    assert verdict["kind"] == "limit_raised"
    row = verdict["rows"][0]
    assert (row["outcome"], row["parent_reason"], row["child_reason"], row["parent_count"], row["child_count"]) == (
        "went_past_stop", "max_new_tokens", "eos", 16, 41)
    assert verdict["sentence"].startswith("row 0 went past the parent's stop: the parent was cut by max_new_tokens = 16 "
                                          "(parent 16 tokens, child 41, stopped by eos)")


def test_run_ending_by_eos_rerun_with_a_larger_limit_stops_at_the_same_place(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    """Two budgets, the same stop, so the stop was EOS and not the cap."""
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompts=["count down from 9 :", "count down from 4 :"],
                                                       generation={"max_new_tokens": 16}))
    verdict = rerun(capsys, parent, "--set", "generation.max_new_tokens=64")["verdict"]
    assert verdict["kind"] == "limit_raised"
    assert [(r["outcome"], r["parent_count"], r["child_count"]) for r in verdict["rows"]] == [
        ("same_place_by_eos", 10, 10), ("same_place_by_eos", 5, 5)]
    assert "row 0 stopped at the same place by EOS: the parent's stop was not the limit (both 10 tokens, limit 16 -> 64)" in verdict["sentence"]


@pytest.mark.parametrize("how", [("--suppress-eos",), ("--set", "generation.suppress_tokens=[2]")], ids=["flag", "set"])
def test_suppress_eos_says_how_far_each_row_went_past_its_eos(capsys, tmp_path: Path, tiny_lm: Path, how) -> None:
    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 12}))
    done = rerun(capsys, parent, *how)
    verdict = done["verdict"]
    assert verdict["kind"] == "eos_suppressed"
    row = verdict["rows"][0]
    assert (row["outcome"], row["parent_reason"], row["parent_count"], row["child_count"]) == ("went_past_eos", "eos", 4, 12)
    assert verdict["sentence"].startswith("row 0 went 9 tokens past its EOS: the parent stopped by EOS at token 3")
    assert 2 not in read_ids(Path(done["child"]))["sequence_0"]  # tiny-lm's EOS never came
    assert done["lineage"]["changes"][0]["key"] == "generation.suppress_tokens"


# -- identity refusals ----------------------------------------------------------------------------


def test_parent_whose_model_changed_is_refused_then_allowed_and_recorded(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_lm, model)
    parent = make_parent(capsys, tmp_path, request_text(model, generation={"max_new_tokens": 8}))
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "temperature": 0.5}))
    before = store_entries(parent.parent)

    code, out, err = cli(capsys, "rerun", parent)
    assert code == 1 and out == ""
    message = " ".join(err.split())
    assert "the model files in" in message and "changed: generation_config.json" in message and "--allow-changed" in message
    assert store_entries(parent.parent) == before  # nothing written

    done = rerun(capsys, parent, "--allow-changed", "--note", "config edited on purpose")
    lineage = done["lineage"]
    assert lineage["allow_changed"] is True
    assert any("changed: generation_config.json" in d for d in lineage["changed_since_parent"])
    assert done["verdict"]["changed_since_parent"] == lineage["changed_since_parent"]


# -- lineage integrity; the parent is never touched -----------------------------------------------


def test_child_lineage_verifies_and_parent_signoff_stays_valid(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    from genrun.analysis.signoffs import evaluate_signoffs

    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    code, _, err = cli(capsys, "signoff", parent, "--decision", "accept", "--by", "alice@example.com", "--note", "baseline")
    assert code == 0, err
    manifest = (parent / layout.MANIFEST).read_bytes()
    done = rerun(capsys, parent, "--set", "generation.max_new_tokens=16")
    child = Path(done["child"])

    assert layout.LINEAGE in (child / layout.FROZEN_MANIFEST).read_text()
    assert layout.LINEAGE in (child / layout.MANIFEST).read_text()
    code, out, err = cli(capsys, "verify", child, "--json")
    assert code == 0 and orjson.loads(out)["summary"]["failed"] == 0, out
    (lineage_finding,) = [f for f in orjson.loads(out)["findings"] if f["name"] == "lineage"]
    assert lineage_finding["status"] == "PASS" and "parent digest matches" in lineage_finding["message"]
    assert (parent / layout.MANIFEST).read_bytes() == manifest
    assert [s.state for s in evaluate_signoffs(parent, None)] == ["unsigned"]
    code, out, _ = cli(capsys, "verify", parent, "--json")
    assert code == 0 and orjson.loads(out)["summary"]["failed"] == 0

    diffed = run_json(capsys, "diff", parent, child)  # diff gains the verdict: one descends from the other
    assert diffed["lineage"]["kind"] == "limit_raised"
    assert diffed["lineage"]["sentence"] == done["verdict"]["sentence"]
    assert run_json(capsys, "diff", child, parent)["lineage"]["parent"] == str(parent)


def test_tampered_child_lineage_is_caught_by_verify(capsys, shared_parent: Path) -> None:
    parent = shared_parent
    child = Path(rerun(capsys, parent)["child"])
    path = child / layout.LINEAGE
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(parent.name.encode(), b"someone-else"))
    code, out, _ = cli(capsys, "verify", child, "--json")
    assert code != 0 and orjson.loads(out)["summary"]["failed"] >= 1
    assert layout.LINEAGE in out


# -- refused changes: clear errors, nothing written ------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    (("--set", "generation.max_new_token=64"), None),  # generation keys are checked against GenerationConfig at plan
    (("--set", "sed=1"), "unknown key 'sed' at the top level; did you mean 'seed'?"),
    (("--set", "model.dtyp=float16"), "unknown key 'dtyp' in [model]; did you mean 'dtype'?"),
    (("--set", "seed=-1"), "top-level key 'seed' = -1: Input should be greater than or equal to 0"),
    (("--set", "seed"), "is not KEY=VALUE"),
    (("--unset", "generation.top_k"), "the parent's request has no 'generation.top_k'"),
])
def test_bad_changes_are_refused_and_nothing_is_written(capsys, shared_parent: Path, args, expected) -> None:
    parent = shared_parent
    before = store_entries(parent.parent)
    code, out, err = cli(capsys, "rerun", parent, *args)
    message = " ".join(err.split())
    assert code == 2 and out == "", message
    assert (expected or "max_new_tokens") in message
    assert store_entries(parent.parent) == before


def test_unsealed_or_damaged_parent_is_refused(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    (tmp_path / "r.toml").write_text(request_text(tiny_lm, generation={"max_new_tokens": 8}))
    planned = Path(run_json(capsys, "plan", tmp_path / "r.toml", "--store", tmp_path / "store")["snapshot"])
    code, _, err = cli(capsys, "rerun", planned)
    assert code == 1 and "is not sealed" in err

    parent = make_parent(capsys, tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    (parent / layout.RESULT).chmod(0o644)
    (parent / layout.RESULT).write_text((parent / layout.RESULT).read_text().replace('"succeeded"', '"failed"'))
    code, _, err = cli(capsys, "rerun", parent)
    assert code == 1 and "result.json no longer matches its manifest" in " ".join(err.split())


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unquoted_string_value_and_a_changed_prompt_diverge_at_token_0(capsys, shared_parent: Path) -> None:
    done = rerun(capsys, shared_parent, "--set", "input.prompt=count down from 2 :")
    assert done["lineage"]["changes"][0]["child_value"] == "count down from 2 :"
    verdict = done["verdict"]
    assert verdict["kind"] == "diverged"
    assert verdict["sentence"].startswith("diverged at token 0 of row 0 (with input.prompt 'count down from 3 :' -> 'count down from 2 :')")
    assert verdict["sentence"].endswith("no recorded environment or determinism setting differs")


def test_entry_point_and_relative_model_path_resolve_as_the_parent_resolved_them(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    """The parent's request file sat next to its entry-point module and named the model relatively; the rerun runs from elsewhere."""
    project = tmp_path / "project"
    shutil.copytree(tiny_lm, project / "models" / "lm")
    module = write_entry_module(project, "rerun_entry_points")
    text = request_text(Path("models/lm"), generation={"max_new_tokens": 8}, entrypoint=f"{module}:decode_only")
    parent = make_parent(capsys, project, text)
    done = rerun(capsys, parent, "--set", "generation.max_new_tokens=16")
    assert done["lineage"]["model_path_rewritten"] is False
    assert read_json(Path(done["child"]), layout.REQUEST)["model"]["path"] == "models/lm"
    assert done["verdict"]["rows"][0]["outcome"] == "same_place_by_eos"
