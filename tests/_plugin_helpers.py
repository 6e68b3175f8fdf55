"""The example plugin backend genrun ships (`genrun.examples.counter_backend`) installed in this process, for in-process runs."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from genrun.runner.backends import installed_backends


@pytest.fixture
def counter_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """The counter backend installed as a distribution would install it (a dist-info on `sys.path`); yields its
    backend class; removed again, with the backend cache, afterwards."""
    dist = tmp_path / "site" / "genrun_counter_backend-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: genrun-counter-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[genrun.backends]\ncounter = genrun.examples.counter_backend:create_backend\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed_backends.cache_clear()
    from genrun.examples import counter_backend

    yield counter_backend.CounterBackend
    monkeypatch.undo()
    installed_backends.cache_clear()


def counter_request(tmp_path: Path, *, steps: int = 3, config: str = '{"start": 7}\n') -> str:
    """A request for the counter backend; its "model" directory holds `config` as `config.json`."""
    model = tmp_path / "counter-model"
    model.mkdir()
    (model / "config.json").write_text(config)
    return f'name = "count"\nseed = 0\n[model]\npath = "{model}"\nbackend = "counter"\ndevice = "cpu"\n[generation]\nsteps = {steps}\n'
