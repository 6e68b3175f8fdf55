"""Loop-backend requests for tests: a loop module written beside its request, run through the real CLI in-process."""

import textwrap
from pathlib import Path
from typing import Any

import orjson

from conftest import CliRun, run_cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def write_loop(tmp_path: Path, body: str, *, kwargs: str = "{}", extra: str = "", generation: str = "") -> Path:
    """`tmp_path/loop.toml` naming `myloop:generate` (`body` is the module's source) over a one-file model directory."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text('{"eos": 2}\n')
    (tmp_path / "myloop.py").write_text(textwrap.dedent(body))
    request = tmp_path / "loop.toml"
    request.write_text(textwrap.dedent(f"""\
        name = "loop-test"
        seed = 0
        [model]
        path = "model"
        backend = "loop"
        device = "cpu"
        [loop]
        callable = "myloop:generate"
        kwargs = {kwargs}
        [input]
        prompt = "x"
        [generation]
        {generation}
        [progress]
        every_units = 2
        """) + extra)
    return request


def run(request: Path, store: Path, *more: str) -> tuple[CliRun, Path | None]:
    """`genrun run REQUEST --json`: the process result and the snapshot (`None` when nothing was planned)."""
    done = run_cli("run", request, "--store", store, "--json", *more)
    try:
        return done, Path(orjson.loads(done.stdout)["snapshot"])
    except (orjson.JSONDecodeError, KeyError):
        return done, None


def verify(snapshot: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """`genrun verify --json`: exit code and findings by name."""
    done = run_cli("verify", snapshot, "--json")
    return done.returncode, {f["name"]: f for f in orjson.loads(done.stdout)["findings"]}


def read(snapshot: Path, name: str) -> Any:
    """One JSON artifact."""
    return orjson.loads((snapshot / name).read_bytes())
