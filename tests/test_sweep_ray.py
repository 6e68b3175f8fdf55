"""The Ray executor on a real local Ray instance: the same greedy items give the same token ids as the local executor."""

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray tests need the ray extra: pip install -e '.[test]'")

from _lm_helpers import read_ids  # noqa: E402
from _sweep_helpers import only_sweep, read, write_sweep  # noqa: E402
from genrun.runner.cli import main  # noqa: E402

ROWS = [{"input.prompt": "count down from 4 :"}, {"input.prompt": "count down from 9 :"}, {"input.prompt": "count down from 12 :"}]


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One local instance for the module: temp RAY_TMPDIR and HOME (token auth writes ~/.ray), shut down after."""
    root = tmp_path_factory.mktemp("ray")
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_TMPDIR")}
    os.environ["HOME"], os.environ["RAY_TMPDIR"] = str(root / "home"), str(root / "tmp")
    (root / "home").mkdir()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_ray_and_local_sweeps_give_identical_token_ids(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    ids = {}
    for kind in ("local", "ray"):
        sweep_file = write_sweep(tmp_path / kind, name=kind, rows=ROWS, kind=kind, workers=1, max_new_tokens=16)
        store = tmp_path / kind / "store"
        assert main(["sweep", str(sweep_file), "--store", str(store)]) == 0
        sweep = only_sweep(store)
        result = read(sweep / "sweep-result.json")
        assert result["counts"] == {"succeeded": 3}
        ids[kind] = [read_ids(store / item["snapshot_id"])["sequence_0"] for item in result["items"]]
        if kind == "ray":
            records = [read(store / item["snapshot_id"] / "worker-model.json") for item in result["items"]]
            assert [r["reused"] for r in records] == [False, True, True] and {r["worker"] for r in records} == {"ray-0"}
            assert {r["pid"] for r in records} != {os.getpid()}  # ran in the actor's process
            assert main(["verify", str(sweep)]) == 0
    assert ids["ray"] == ids["local"]
    assert [len(x) for x in ids["local"]] == [5, 10, 13]  # n-1 .. 0, then EOS
