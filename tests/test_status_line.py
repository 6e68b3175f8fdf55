"""A status line while genrun works without printing (issue 41, item 5): planning took up to a minute on a loaded
machine with nothing on the terminal. On a terminal `plan`, `run` and `sweep plan` show what they are doing on one
line that is cleared afterwards; piped, their output is what it was, with not a byte more.

The terminal is a real pseudo-terminal (`test_run_log.run_under_pty`); the piped runs are the real CLI in-process.
"""

import re
from pathlib import Path
from typing import get_args

from conftest import EXAMPLES, run_cli
from test_run_log import run_under_pty

from genrun.runner.cli._output import working
from genrun.runner.cli.plan import PLANNING_STEPS
from genrun.runner.phases import PlanPhase

STATUS = re.compile(r"planning \S+tiny\.toml: (" + "|".join(map(re.escape, PLANNING_STEPS.values())) + ")")


def test_plan_on_a_terminal_shows_its_phase_on_a_status_line(tmp_path: Path) -> None:
    code, terminal = run_under_pty("plan", EXAMPLES / "tiny.toml", "--store", tmp_path / "store")
    assert code == 0, terminal
    assert STATUS.search(terminal), terminal[:2000]
    assert "planned " in terminal


def test_plan_piped_prints_exactly_its_summary(tmp_path: Path) -> None:
    proc = run_cli("plan", EXAMPLES / "tiny.toml", "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("planned ") and [line.split(":")[0] for line in lines[1:]] == ["  budget", "  memory"], lines
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr and "planning" not in proc.stderr


def test_sweep_plan_on_a_terminal_shows_the_items_it_validated(tmp_path: Path) -> None:
    code, terminal = run_under_pty("sweep", "plan", EXAMPLES / "sweep" / "countdowns.toml", "--store", tmp_path / "store")
    assert code == 0, terminal
    assert re.search(r"planning the sweep: validated \d/6 items", terminal), terminal[:2000]


def test_the_status_line_is_nothing_off_a_terminal(capsys) -> None:  # noqa: ANN001
    with working("exporting") as say:  # `export --mlflow` uses the same line; under pytest stderr is no terminal
        say("still exporting")
    assert capsys.readouterr().err == ""


def test_every_planning_phase_has_words_for_any_backend() -> None:
    """The budget phase said "checking the token and memory budget" while a diffusion plan counted steps and a loop
    frames: the status line is shown before the backend's unit is known, so no phase names one (issue 41, item 11)."""
    assert set(PLANNING_STEPS) == set(get_args(PlanPhase))
    assert not [words for words in PLANNING_STEPS.values() if re.search(r"\b(tokens?|frames?|steps?)\b", words)]
