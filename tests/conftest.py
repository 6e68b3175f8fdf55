"""Fixtures shared by every test module: the bundled model, an isolated hash cache, the real CLI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
TINY_LM = EXAMPLES / "models" / "tiny-lm"


@pytest.fixture(scope="session", autouse=True)
def isolated_caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep genrun's hash cache out of ~/.cache and never let transformers reach for the hub."""
    cache = tmp_path_factory.mktemp("genrun-cache")
    os.environ["GENRUN_CACHE_DIR"] = str(cache)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.pop("GENRUN_STORE", None)
    return cache


@pytest.fixture(scope="session")
def tiny_lm() -> Path:
    """The bundled countdown model (examples/models/tiny-lm)."""
    assert (TINY_LM / "config.json").is_file(), "run examples/models/make_tiny_lm.py to build the bundled model"
    return TINY_LM


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real `genrun` CLI in a subprocess (`python -m genrun.runner.cli`), capturing text output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "genrun.runner.cli", *map(str, args)],
        cwd=cwd or REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def write_request(directory: Path, text: str, name: str = "request.toml") -> Path:
    """Write a request file (TOML or JSON by extension) and return its path."""
    path = directory / name
    path.write_text(text)
    return path


def tiny_request(model: Path, *, prompt: str = "count down from 5 :", generation: str = "max_new_tokens = 16",
                 name: str = "t", top: str = "", tables: str = "") -> str:
    """A TOML request for the bundled model; `generation` is the body of the [generation] table,
    `top` adds top-level keys and `tables` appends whole tables (e.g. "[progress]\nevery_units = 1")."""
    return (
        f'name = "{name}"\nseed = 0\n{top}\n'
        f'[model]\npath = "{model}"\ndtype = "float32"\ndevice = "cpu"\n'
        f'[input]\nprompt = "{prompt}"\n'
        f"[generation]\n{generation}\n{tables}\n"
    )
