"""The real `genrun` command line run in-process (`main`), with its stdout/stderr captured by pytest's capsys."""

from pathlib import Path

import orjson
import pytest

from genrun.runner.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `genrun ARGS`."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> dict:
    """`genrun ARGS --json`, which must exit 0; its JSON document."""
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    return orjson.loads(out)


def run_request(capsys: pytest.CaptureFixture[str], directory: Path, text: str, name: str = "request.toml") -> Path:
    """Write a request into `directory` and `genrun run` it into `directory/store`; the sealed snapshot."""
    (directory / name).write_text(text)
    return Path(run_json(capsys, "run", directory / name, "--store", directory / "store")["snapshot"])


def sealed_run(directory: Path, text: str) -> Path:
    """For module fixtures (no capsys there): write a request, `genrun run` it, return the sealed snapshot."""
    (directory / "r.toml").write_text(text)
    assert main(["run", str(directory / "r.toml"), "--store", str(directory / "store"), "--json"]) == 0
    return next(p for p in (directory / "store").iterdir() if not p.name.startswith("."))
