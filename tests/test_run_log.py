"""genrun owns the terminal: library chatter goes to the snapshot's run-log.ndjson, in every entry point.

Real runs of the bundled tiny models through the CLI (stderr a pipe, and under a pseudo-terminal), a sweep worker,
and the library API. What a library printed must be in the log and never on the terminal; the user's own prints are
on both.
"""

import fcntl
import importlib.util
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from conftest import EXAMPLES, PROCESS_TIMEOUT_S, REPO, run_cli_subprocess, tiny_request, write_request
from _sweep_helpers import write_sweep

from genrun.schemas import RunLogLine, layout
from genrun.snapshot_dir import SnapshotDir

NEVER_ON_TERMINAL = ("Loading weights", "Loading pipeline components", "pip install", "accelerate", "deprecated",
                     "Both `max_new_tokens`", "it/s]", "[transformers]")
"""What transformers, diffusers and tqdm print during these runs (and nothing of genrun's own output contains)."""

IN_LOG = {
    "tiny": ("Loading weights",),
    "tiny-diffusion": ("Loading pipeline components",)
    + (("`accelerate` was not found", "pip install accelerate") if importlib.util.find_spec("accelerate") is None else ()),
    "tiny-whisper-long-form": ("Loading weights", "Both `max_new_tokens`"),
}
"""Per bundled example: lines its libraries print on every run in this environment."""


def run_under_pty(*args: str | Path) -> tuple[int, str]:
    """The real CLI with stdin, stdout and stderr a pseudo-terminal (as in a user's shell); its exit code and output."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # 50 x 200: a bar has room to draw
    proc = subprocess.Popen([sys.executable, "-m", "genrun.runner.cli", *map(str, args)], cwd=REPO,
                            stdin=terminal, stdout=terminal, stderr=terminal, env={**os.environ, "COLUMNS": "200"})
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    return proc.wait(timeout=PROCESS_TIMEOUT_S), ANSI.sub("", b"".join(chunks).decode(errors="replace"))


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Colour and cursor sequences genrun's own terminal output carries under a terminal."""


def log_lines(snapshot: Path) -> list[RunLogLine]:
    path = snapshot / layout.RUN_LOG
    return [RunLogLine.model_validate_json(line) for line in path.read_text().splitlines()] if path.is_file() else []


def only_snapshot(store: Path) -> Path:
    found = [p for p in store.iterdir() if (p / layout.RESULT).is_file()]
    assert len(found) == 1, found
    return found[0]


def assert_quiet_terminal_and_logged(terminal: str, snapshot: Path, expected: tuple[str, ...]) -> None:
    leaked = [s for s in NEVER_ON_TERMINAL if s in terminal]
    assert not leaked, f"library output on the terminal: {leaked}\n{terminal}"
    logged = "\n".join(line.text for line in log_lines(snapshot))
    assert all(s in logged for s in expected), (expected, logged)
    assert not any(line.shown for line in log_lines(snapshot))  # nothing of the user's: every line is a library's


@pytest.mark.parametrize("example", sorted(IN_LOG))
def test_cli_with_stderr_a_pipe_keeps_library_output_in_the_log(tmp_path: Path, example: str) -> None:
    store = tmp_path / "store"
    proc = run_cli_subprocess("run", EXAMPLES / f"{example}.toml", "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert "succeeded:" in proc.stderr  # genrun's own summary still reaches the terminal
    assert_quiet_terminal_and_logged(proc.stdout + proc.stderr, only_snapshot(store), IN_LOG[example])


@pytest.mark.parametrize("example", sorted(IN_LOG))
def test_cli_in_a_terminal_keeps_library_output_in_the_log(tmp_path: Path, example: str) -> None:
    store = tmp_path / "store"
    code, terminal = run_under_pty("run", EXAMPLES / f"{example}.toml", "--store", store)
    assert code == 0, terminal
    assert "succeeded:" in terminal
    assert_quiet_terminal_and_logged(terminal, only_snapshot(store), IN_LOG[example])


def test_rerun_with_stderr_a_pipe_keeps_loading_weights_in_the_childs_log(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    assert run_cli_subprocess("run", write_request(tmp_path, tiny_request(tiny_lm)), "--store", store).returncode == 0
    parent = only_snapshot(store)
    proc = run_cli_subprocess("rerun", parent, "--set", "generation.max_new_tokens=4", "--note", "shorter", "--store", store)
    assert proc.returncode == 0, proc.stderr
    child = next(p for p in store.iterdir() if (p / layout.LINEAGE).is_file())
    assert_quiet_terminal_and_logged(proc.stdout + proc.stderr, child, ("Loading weights",))


def test_sweep_workers_keep_their_model_load_in_the_items_log(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sw", grid={"generation.max_new_tokens": [3, 4]}, workers=1, max_new_tokens=4)
    store = tmp_path / "store"
    proc = run_cli_subprocess("sweep", "run", sweep, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert not [s for s in NEVER_ON_TERMINAL if s in proc.stdout + proc.stderr], proc.stderr
    items = [p for p in store.iterdir() if (p / layout.RESULT).is_file()]
    assert len(items) == 2
    # one worker: the item it loaded the model for has the load's bar in its log; the other reused the model
    loads = [item for item in items if any("Loading weights" in line.text for line in log_lines(item))]
    assert len(loads) == 1, [log_lines(item) for item in items]
    assert all(line.t < 0 for line in log_lines(loads[0]) if "Loading weights" in line.text)  # before the item's run began


ENTRY = '''
def count_down(model, tok, inputs, generation):
    print("hello from the entry point")
    enc = tok(inputs["prompt"], return_tensors="pt")
    return model.generate(**enc, tokenizer=tok, **generation)
'''


def test_library_api_keeps_chatter_off_the_terminal_and_user_prints_on_it(tmp_path: Path, tiny_lm: Path,
                                                                        capfd: pytest.CaptureFixture[str]) -> None:
    import genrun

    (tmp_path / "talking_entry.py").write_text(ENTRY)
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 4",
                                                    tables='[entrypoint]\ncallable = "talking_entry:count_down"'))
    streams = sys.stdout, sys.stderr
    capfd.readouterr()
    snapshot, result = genrun.run(request, store=tmp_path / "store")
    out, err = capfd.readouterr()
    assert result.status == "succeeded"
    assert (sys.stdout, sys.stderr) == streams  # the capture is put back
    assert "Loading weights" not in out + err
    assert "hello from the entry point" in out  # the user's own print stays on the terminal ...
    lines = log_lines(snapshot)
    user = [line for line in lines if line.text == "hello from the entry point"]
    assert len(user) == 1 and user[0].shown and user[0].stream == "stdout" and user[0].source == "talking_entry"  # ... and is logged
    bars = [line for line in lines if "Loading weights" in line.text]
    assert len(bars) == 1 and not bars[0].shown and bars[0].source == "tqdm" and "\r" not in bars[0].text
    assert json.loads((snapshot / layout.RUN_LOG).read_text().splitlines()[0])["t"] >= 0


def _frame_of(filename: str, module: str):  # noqa: ANN202 (a frame)
    scope: dict = {"__name__": module, "sys": sys}
    exec(compile("frame = sys._getframe()", filename, "exec"), scope)
    return scope["frame"]


def test_the_writer_is_found_above_the_plumbing() -> None:
    from genrun.runner.run_log import writer_of

    assert writer_of(_frame_of("/venv/lib/python3.11/site-packages/somelib/bar.py", "somelib.bar")) == ("library", "somelib")
    assert writer_of(_frame_of("/home/me/project/entry.py", "entry")) == ("user", "entry")
    assert writer_of(_frame_of("<string>", "__main__")) == ("user", "__main__")  # `python -c`: the user's own
    assert writer_of(_frame_of("/anywhere/runner/cli/_output.py", "genrun.runner.cli._output")) == ("genrun", "genrun")
    assert writer_of(sys._getframe()) == ("user", "test_run_log")


def test_a_print_a_library_replaced_still_belongs_to_its_caller(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's tqdm_ray replaces `builtins.print` process-wide (once any Ray progress bar showed): a user's print then runs
    through the library's function, and must still count as the user's (on the terminal), not as the library's."""
    import builtins

    from genrun.runner.cli._library_output import library_output_taken_over

    namespace: dict = {"__name__": "somelib.printing", "original": builtins.print}
    exec(compile("def safe_print(*args, **kwargs):\n    return original(*args, **kwargs)\n",
                 "/venv/lib/site-packages/somelib/printing.py", "exec"), namespace)
    monkeypatch.setattr(builtins, "print", namespace["safe_print"])
    with library_output_taken_over(False):
        print("the user's own line")
    captured = capsys.readouterr()
    assert "the user's own line" in captured.out and "somelib" not in captured.err


def test_a_log_that_cannot_be_written_never_fails_the_writer_and_says_so(tmp_path: Path) -> None:
    from genrun.runner.run_log import HELD_LINES_LIMIT, RunLog

    log = RunLog()
    for i in range(HELD_LINES_LIMIT + 5):  # before the snapshot is known: held, the excess counted
        log.add(0.0, "stderr", "lib", False, f"line {i}")
    log.open(SnapshotDir(tmp_path / "gone", writable=True), origin=0.0)  # the directory does not exist: every write fails
    log.add(1.0, "stderr", "lib", False, "later")
    log.close()
    assert log.failure is not None and layout.RUN_LOG in log.failure and "is incomplete" in log.failure

    written = RunLog()
    written.add(0.0, "stderr", "lib", False, "first")
    written.open(SnapshotDir(tmp_path, writable=True), origin=0.0)
    written.close()
    assert [line.text for line in log_lines(tmp_path)] == ["first"] and written.failure is None


def test_a_log_line_of_an_unknown_stream_or_with_extra_keys_is_refused() -> None:
    from pydantic import ValidationError

    good = {"t": 0.5, "stream": "stderr", "source": "tqdm", "shown": False, "text": "x"}
    assert RunLogLine.model_validate(good).text == "x"
    for bad in ({**good, "stream": "tty"}, {**good, "colour": "red"}, {k: v for k, v in good.items() if k != "shown"}):
        with pytest.raises(ValidationError):
            RunLogLine.model_validate(bad)


def test_a_command_that_runs_nothing_shows_what_libraries_printed_after_it(capsys: pytest.CaptureFixture[str]) -> None:
    from genrun.runner.cli._library_output import library_output_taken_over

    library = compile('import sys\nprint("notice from a library", file=sys.stderr)', "/venv/lib/site-packages/somelib/x.py", "exec")
    for quiet in (False, True):
        with library_output_taken_over(quiet):
            exec(library, {"__name__": "somelib.x"})
            assert "notice from a library" not in capsys.readouterr().err  # held while the command runs
            print("the user's own line")
        captured = capsys.readouterr()
        assert "the user's own line" in captured.out and "the user's own line" not in captured.err  # shown once, as printed
        assert ("somelib: notice from a library" in captured.err) is not quiet


def test_a_library_that_printed_many_lines_is_shown_by_its_first_few_and_a_count(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM logs a dozen configuration lines while a request is checked: after a command the first few of each library
    are shown, then one line counting the rest; another library's single line is shown whole."""
    from genrun.runner.cli._library_output import SHOWN_PER_LIBRARY, library_output_taken_over

    chatty = compile('import sys\nfor i in range(10):\n    print(f"config line {i}", file=sys.stderr)',
                     "/venv/lib/site-packages/chattylib/x.py", "exec")
    terse = compile('import sys\nprint("one notice", file=sys.stderr)', "/venv/lib/site-packages/terselib/x.py", "exec")
    with library_output_taken_over(False):
        exec(chatty, {"__name__": "chattylib.x"})
        exec(terse, {"__name__": "terselib.x"})
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "config line" in line] == [f"  chattylib: config line {i}" for i in range(SHOWN_PER_LIBRARY)]
    assert f"  chattylib: … and {10 - SHOWN_PER_LIBRARY} more lines" in "\n".join(err)
    assert "  terselib: one notice" in err and not any("terselib: …" in line for line in err)


def test_items_run_on_threads_each_keep_their_own_library_lines(tmp_path: Path) -> None:
    """A batching worker runs several items at once, one thread each: a line goes to the capture its thread opened."""
    import threading

    from genrun.runner.run_log import captured

    library = compile('import sys\nprint(f"notice for {item}", file=sys.stderr)', "/venv/lib/site-packages/somelib/x.py", "exec")
    both_open = threading.Barrier(2)

    def item(name: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        with captured() as log:
            log.open(SnapshotDir(folder, writable=True), origin=0.0)
            both_open.wait()  # the other item's capture is open too (and may be the innermost)
            exec(library, {"__name__": "somelib.x", "item": name})
            both_open.wait()

    threads = [threading.Thread(target=item, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [line.text for line in log_lines(tmp_path / "a")] == ["notice for a"]
    assert [line.text for line in log_lines(tmp_path / "b")] == ["notice for b"]
