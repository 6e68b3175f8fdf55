"""`conftest.run_cli` runs the real CLI in this process: it captures like a subprocess would, and a run
leaves nothing behind that a later in-process run could inherit (environment, cwd, signal handlers,
transformers' patched `generate`, users' modules, console streams)."""

import contextlib
import io
import os
from pathlib import Path

import orjson
import pytest

import genrun.runner.cli
from conftest import EXAMPLES, process_state, run_cli
from genrun.runner.backends.entrypoint import RESULT_TEXT
from genrun.runner.cli._output import print_error, stderr_console
from genrun.schemas import layout

ENTRY = '''
def generate(model, tok, inputs, generation):
    return {word!r}
'''


def test_json_run_is_captured_and_state_is_restored(tmp_path: Path) -> None:
    import torch  # noqa: F401  (imported first, so that the state before includes their settings)
    import transformers  # noqa: F401

    before, environ, cwd = process_state(), dict(os.environ), Path.cwd()
    assert before.generate is not None and before.torch_threads is not None
    proc = run_cli("run", EXAMPLES / "tiny.toml", "--json", env={"GENRUN_STORE": str(tmp_path / "from-env")})
    assert proc.returncode == 0, proc.stderr
    document = orjson.loads(proc.stdout)  # the bytes print_json wrote to sys.stdout.buffer, and nothing else
    assert Path(document["snapshot"]).parent == tmp_path / "from-env"  # the env override reached the run
    assert process_state() == before and dict(os.environ) == environ and Path.cwd() == cwd  # signal handlers included


def test_human_output_goes_to_the_captured_stderr(tmp_path: Path) -> None:
    proc = run_cli("run", EXAMPLES / "tiny-budget.toml", "--store", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "max_new_tokens" in proc.stderr and proc.stdout == ""
    assert "\x1b[" not in proc.stderr  # not a terminal: no colour codes


def test_cwd_is_entered_and_left(tmp_path: Path) -> None:
    (tmp_path / "request.toml").write_text((EXAMPLES / "tiny-budget.toml").read_text().replace('"models/tiny-lm"', f'"{EXAMPLES / "models" / "tiny-lm"}"'))
    cwd = Path.cwd()
    proc = run_cli("plan", "request.toml", "--store", "store", "--json", cwd=tmp_path)  # both relative to cwd
    assert proc.returncode == 0, proc.stderr
    snapshot = Path(orjson.loads(proc.stdout)["snapshot"])  # reported as given: relative to the cwd of the run
    assert snapshot.parent == Path("store") and (tmp_path / snapshot / layout.REQUEST).is_file() and Path.cwd() == cwd


def test_usage_error_is_exit_2_like_the_console_script() -> None:
    proc = run_cli("verify")
    assert proc.returncode == 2 and "usage: genrun verify" in proc.stderr
    assert run_cli("--version").stdout.startswith("genrun ")


def test_a_crash_escaping_main_fails_the_test_and_still_restores_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash() -> None:
        raise RuntimeError("a bug, not a refusal")

    monkeypatch.setattr(genrun.runner.cli, "offline_hub", crash)
    environ, cwd = dict(os.environ), Path.cwd()
    with pytest.raises(RuntimeError, match="a bug, not a refusal"):
        run_cli("ls", "--store", tmp_path, env={"GENRUN_SOMETHING": "1"}, cwd=tmp_path)
    assert dict(os.environ) == environ and Path.cwd() == cwd


def test_users_modules_do_not_leak_into_the_next_run(tmp_path: Path) -> None:
    """Two requests whose entry points share a module name but not its code: each run imports its own."""
    words = {}
    for word in ("first", "second"):
        directory = tmp_path / word
        directory.mkdir()
        (directory / "same_name_entry.py").write_text(ENTRY.format(word=word))
        (directory / "request.toml").write_text(
            (EXAMPLES / "tiny-budget.toml").read_text().replace('"models/tiny-lm"', f'"{EXAMPLES / "models" / "tiny-lm"}"')
            + '\n[entrypoint]\ncallable = "same_name_entry:generate"\n'
        )
        proc = run_cli("run", directory / "request.toml", "--store", directory / "store", "--json")
        assert proc.returncode == 0, proc.stderr
        snapshot = Path(orjson.loads(proc.stdout)["snapshot"])
        words[word] = (snapshot / layout.OUTPUTS_DIR / RESULT_TEXT).read_text()
    assert words == {"first": "first", "second": "second"}


def test_console_follows_the_current_stream() -> None:
    """The CLI's rich consoles print to whatever sys.stderr is at call time, not the stream seen at import."""
    for _ in range(2):
        captured = io.StringIO()
        with contextlib.redirect_stderr(captured):
            print_error("[generation] is wrong")
            stderr_console.print("second line")
        assert captured.getvalue() == "genrun: error: [generation] is wrong\nsecond line\n"
