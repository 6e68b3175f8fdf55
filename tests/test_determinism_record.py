"""`determinism.json` on every run, and `[determinism] strict = true` turning deterministic algorithms on for the run only."""

from pathlib import Path

import pytest

from genrun.schemas import Determinism, layout

from _cli_helpers import cli, run_request
from _lm_helpers import read_json, request_text


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> Path:
    return run_request(capsys, tmp_path, text, "r.toml")


def test_every_run_records_what_determinism_depends_on(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    import torch

    snapshot = run(capsys, tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    record = Determinism.model_validate(read_json(snapshot, layout.DETERMINISM))
    assert (record.seed, record.strict_requested, record.deterministic_algorithms, record.sampling, record.device) == (
        0, False, torch.are_deterministic_algorithms_enabled(), False, "cpu")
    assert record.torch_threads == torch.get_num_threads() and record.torch_interop_threads is not None
    # CUDA-only settings are not guessed on a CPU run
    assert (record.cudnn_deterministic, record.cublas_workspace_config, record.cuda_matmul_allow_tf32) == (None, None, None)
    assert layout.DETERMINISM in (snapshot / layout.MANIFEST).read_text()


def test_strict_turns_deterministic_algorithms_on_for_the_run_only(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    import torch

    assert not torch.are_deterministic_algorithms_enabled()
    text = request_text(tiny_lm, generation={"max_new_tokens": 8}) + "[determinism]\nstrict = true\n"
    snapshot = run(capsys, tmp_path, text)
    record = Determinism.model_validate(read_json(snapshot, layout.DETERMINISM))
    assert (record.strict_requested, record.deterministic_algorithms) == (True, True)
    assert read_json(snapshot, layout.REQUEST)["determinism"] == {"strict": True}
    assert not torch.are_deterministic_algorithms_enabled()  # restored for the rest of this process


def test_misspelled_determinism_key_is_refused(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    (tmp_path / "r.toml").write_text(request_text(tiny_lm) + "[determinism]\nstrikt = true\n")
    code, _, err = cli(capsys, "plan", tmp_path / "r.toml", "--store", tmp_path / "store")
    assert code == 2
    assert "unknown key 'strikt' in [determinism]; did you mean 'strict'?" in " ".join(err.split())
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
