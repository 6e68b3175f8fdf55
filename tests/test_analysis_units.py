"""Small pure pieces of analysis: value diffs, suspicious counts, divergence, sparklines, the check registry."""

from array import array

import pytest

from _analysis_helpers import snapshots  # noqa: F401
from genrun.analysis import read_snapshot, summary_line
from genrun.analysis._context import CheckContext
from genrun.analysis._diffing import ABSENT, Change, diff_values, same_json
from genrun.analysis._finding import Examined, Finding, worst
from genrun.analysis._report_render import sparkline
from genrun.analysis._tokenizer import DecoderUnavailable
from genrun.analysis.checks import CHECKS, CheckSpec, is_suspicious_count, run_checks
from genrun.analysis.diff import first_divergence
from genrun.analysis.verify import summarise


@pytest.mark.parametrize("count", [16, 20, 32, 100, 256, 1000, 1024, 4096, 16384, 65536, 131072])
def test_powers_of_two_and_common_budgets_are_suspicious(count: int) -> None:
    assert is_suspicious_count(count)


@pytest.mark.parametrize("count", [1, 2, 4, 8, 13, 17, 255, 999, 16383, 16385])
def test_other_counts_are_not(count: int) -> None:
    assert not is_suspicious_count(count)


def test_diff_values_reports_each_differing_leaf() -> None:
    a = {"generation": {"max_new_tokens": 64, "do_sample": False}, "name": "x", "stop": ["a"]}
    b = {"generation": {"max_new_tokens": 8}, "name": "x", "stop": ["b"], "seed": 1}
    assert diff_values(a, b) == [Change("generation.do_sample", False, ABSENT), Change("generation.max_new_tokens", 64, 8),
                                 Change("seed", ABSENT, 1), Change("stop[0]", "a", "b")]


def test_json_sameness_keeps_bools_apart_from_ints_but_not_ints_from_floats() -> None:
    assert same_json(5, 5.0) and not same_json(True, 1) and not same_json("64", 64) and same_json([1, {"a": 2}], (1, {"a": 2.0}))


def test_first_divergence() -> None:
    ids = array("q", [5, 6, 7, 8])
    assert first_divergence(ids, array("q", ids)) is None
    assert first_divergence(ids, array("q", [5, 6, 9, 8])) == 2
    assert first_divergence(ids, ids[:3]) == 3  # a prefix diverges where it ends
    assert first_divergence(array("q"), ids) == 0


def test_sparkline_scales_into_eight_levels() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3.0] * 5) == "▅▅▅▅▅"
    assert len(sparkline(list(range(1000)), width=48)) == 48 and sparkline([]) == ""


def test_worst_status_orders_fail_warn_pass_skip() -> None:
    assert worst(["PASS", "SKIP", "WARN"]) == "WARN" and worst(["WARN", "FAIL"]) == "FAIL" and worst([]) == "SKIP"


def test_summary_line_has_the_documented_form() -> None:
    findings = (Finding(name="a", status="PASS", message="", examined=Examined(files=3, token_ids=10)),
                Finding(name="b", status="WARN", message="", examined=Examined(files=5, progress_records=7)),
                Finding(name="c", status="SKIP", message=""))
    assert summary_line(summarise(findings)) == ("3 checks: 1 passed, 1 warnings, 0 failed, 1 skipped; "
                                                 "examined 5 files, 10 token ids, 7 progress records")


def test_registry_names_are_unique_and_each_check_documents_its_contract() -> None:
    names = [spec.name for spec in CHECKS]
    assert len(names) == len(set(names)) == 27  # 19 + call_evidence (13), lineage (15), input_files, input_coverage and processor_files (12), call_config and stop_evidence (declared evidence), stages (staged loops)
    assert all(spec.contract for spec in CHECKS)


def test_a_check_that_raises_becomes_a_fail_not_a_crash(snapshots) -> None:
    snap = read_snapshot(snapshots.get("eos"))

    def broken(snapshot, ctx):
        raise KeyError("sequences")

    (found,) = run_checks(snap, CheckContext(decoder=DecoderUnavailable("n/a")), [CheckSpec("broken", broken)])
    assert found.status == "FAIL" and "KeyError" in found.message and "Traceback" in found.evidence["traceback"]


def test_loader_hashes_only_when_asked(snapshots) -> None:
    path = snapshots.get("eos")
    assert all(f.sha256 is None for f in read_snapshot(path, hash_files=False).files.values())
    hashed = read_snapshot(path)
    assert all(len(f.sha256) == 64 for f in hashed.files.values()) and hashed.is_sealed and hashed.problems == {}


def test_safetensors_reader_matches_the_reference_library(snapshots) -> None:
    """The stdlib reader returns what `safetensors.numpy` returns, and refuses a truncated file."""
    from safetensors.numpy import load

    from genrun.analysis._safetensors import SafetensorsError, read_int_tensors
    from genrun.schemas import layout

    data = (snapshots.get("batch") / layout.TOKEN_IDS).read_bytes()
    reference = {name: values.tolist() for name, values in load(data).items()}
    assert {name: values.tolist() for name, values in read_int_tensors(data).items()} == reference
    assert set(reference) == {"sequence_0", "sequence_1"}
    with pytest.raises(SafetensorsError, match="do not hold 10 I64 values"):
        read_int_tensors(data[:-8])  # cut short: the last tensor no longer fits
    with pytest.raises(SafetensorsError, match="covers"):
        read_int_tensors(data + b"\0" * 8)  # trailing bytes no tensor accounts for
    with pytest.raises(SafetensorsError, match="header length"):
        read_int_tensors(data[:12])
