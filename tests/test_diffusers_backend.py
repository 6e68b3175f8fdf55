"""The diffusers backend end to end: real pipelines (the bundled tiny DDIM, a tiny Stable Diffusion with
PNDM, a tiny DanceDiffusion audio pipeline) loaded with `from_pretrained`, run through genrun's real
plan/execute path, the CLI for the example and for real SIGINTs, and `verify` on the results.

Grouped by concern: basics (completed runs, the recorded call, outputs and their hashes), step
counting (callback vs progress bar, PNDM's extra timestep), stop reasons (interrupted by a real
signal on both paths, exception from user code), plan-time refusals and the memory pre-flight,
and diffusers being optional.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import orjson
import pytest

from _diffusion_helpers import (
    REPO,
    TINY_DDIM,
    USER_CODE,
    build_tiny_audio,
    build_tiny_sd,
    diffusion_request,
    events,
    read_json,
    unit_records,
)
from _forked import spawn_cli
from conftest import PROCESS_TIMEOUT_S, CliRun, run_cli, write_request
from genrun.runner.errors import BudgetRefused, RequestError
from genrun.runner.execute import execute_snapshot
from genrun.runner.plan import plan_request
from genrun.runner.store import is_sealed
from genrun.runner.backends.diffusers.evidence import PipelineCallBeforeCall
from genrun.schemas import Result, TokenBudget, layout
from genrun.snapshot_dir import SnapshotDir

EXAMPLE = REPO / "examples" / "tiny-diffusion.toml"


# -- fixtures: pipelines built once per session, runs shared by the tests that read them ---------------------------


@pytest.fixture(scope="session")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sd(tmp_path_factory.mktemp("pipelines") / "tiny-sd-pndm")


@pytest.fixture(scope="session")
def tiny_audio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_audio(tmp_path_factory.mktemp("pipelines") / "tiny-dance")


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[CliRun, Path]:
    """`genrun run examples/tiny-diffusion.toml --json` through the real CLI."""
    store = tmp_path_factory.mktemp("example-store")
    proc = run_cli("run", EXAMPLE, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    return proc, Path(orjson.loads(proc.stdout)["snapshot"])


@pytest.fixture(scope="module")
def sd_run(tmp_path_factory: pytest.TempPathFactory, tiny_sd: Path) -> tuple[Result, Path]:
    """Tiny Stable Diffusion, PNDM, 8 requested steps (9 timesteps), run in-process through plan + execute."""
    directory = tmp_path_factory.mktemp("sd-run")
    request = write_request(directory, diffusion_request(tiny_sd, name="sd", steps=8, prompt="count down"))
    snapshot = plan_request(request, store=directory / "store")
    return execute_snapshot(snapshot, live=False), snapshot


def _in_process(tmp_path: Path, text: str, *, user_code: bool = False) -> tuple[Result, Path]:
    if user_code:
        shutil.copy(USER_CODE / "failing_loader.py", tmp_path)
    snapshot = plan_request(write_request(tmp_path, text), store=tmp_path / "store")
    return execute_snapshot(snapshot, live=False), snapshot


def _verify(snapshot: Path) -> dict:
    proc = run_cli("verify", snapshot, "--json")
    report = orjson.loads(proc.stdout)
    assert proc.returncode == report["exit_code"], proc.stderr
    return report


def _finding(report: dict, name: str) -> dict:
    return next(f for f in report["findings"] if f["name"] == name)


# -- basics -----------------------------------------------------------------------------------------------------------


def test_example_completes_with_one_record_per_step(example_run) -> None:
    _, snapshot = example_run
    result = read_json(snapshot, layout.RESULT)
    assert (result["status"], result["exit_code"], result["unit"], result["generated"]) == ("succeeded", 0, "step", 10)
    assert result["generated_tokens"] == 0 and result["outputs"] == ["image_0.png"]
    (stop,) = read_json(snapshot, layout.STOP)["sequences"]
    assert (stop["reason"], stop["generated"], stop["evidence"]["steps"]["steps_planned"]) == ("completed", 10, 10)
    assert stop["evidence"]["steps"]["step_observation"] == "progress_bar"
    stream = events(snapshot)
    assert stream[0].event == "start" and stream[0].unit == "step" and stream[0].planned_units == 10
    assert stream[-1].event == "end" and stream[-1].generated == 10
    assert [e.generated for e in unit_records(snapshot)] == list(range(1, 11))  # [progress] every_units = 1
    assert all(e.rss_bytes and e.rss_bytes > 0 for e in stream)


def test_example_records_the_call_before_making_it(example_run) -> None:
    _, snapshot = example_run
    call = PipelineCallBeforeCall.model_validate_json((snapshot / layout.PIPELINE_CALL).read_bytes())
    assert (call.pipeline_class, call.scheduler_class, call.components) == ("DDIMPipeline", "DDIMScheduler",
                                                                             {"scheduler": "DDIMScheduler", "unet": "UNet2DModel"})
    assert (call.num_inference_steps, call.num_inference_steps_source, call.timesteps_planned) == (10, "request", 10)
    assert call.scheduler_config["num_train_timesteps"] == 1000 and call.scheduler_config["_class_name"] == "DDIMScheduler"
    assert (call.seed, call.dtype, call.device, call.sample_size) == (0, "float32", "cpu", 32)
    assert call.overrides == {"num_inference_steps": 10}
    assert call.call_arguments["generator"] == "torch.Generator(device='cpu').manual_seed(0)"
    assert call.call_arguments["eta"] == 0.0 and call.call_arguments["output_type"] == "pil"  # signature defaults, made explicit
    assert call.step_observation == "progress_bar" and call.guidance_scale is None
    budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
    assert (budget.units, budget.requested_units, budget.requested_units_source, budget.prompt_tokens) == ("step", 10, "request", None)


def test_pipeline_call_file_round_trips_and_refuses_unknown_keys(example_run) -> None:
    from pydantic import ValidationError

    _, snapshot = example_run
    raw = (snapshot / layout.PIPELINE_CALL).read_bytes()
    loaded = PipelineCallBeforeCall.model_validate_json(raw)
    assert orjson.loads(raw) == loaded.model_dump(mode="json")  # written in normalised form
    assert PipelineCallBeforeCall.model_validate_json(orjson.dumps(loaded.model_dump(mode="json"))) == loaded
    with pytest.raises(ValidationError, match="num_inference_step"):
        PipelineCallBeforeCall.model_validate(orjson.loads(raw) | {"num_inference_step": 10})


def test_example_output_is_a_png_hashed_in_the_manifest(example_run) -> None:
    from PIL import Image

    _, snapshot = example_run
    with Image.open(snapshot / "outputs" / "image_0.png") as image:
        assert (image.format, image.size, image.mode) == ("PNG", (32, 32), "RGB")
    manifest = (snapshot / layout.MANIFEST).read_text()
    assert "  outputs/image_0.png\n" in manifest and f"  {layout.PIPELINE_CALL}\n" in manifest
    check = subprocess.run(["sha256sum", "-c", "--strict", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(manifest.splitlines())


def test_verify_passes_on_the_example(example_run) -> None:
    _, snapshot = example_run
    report = _verify(snapshot)
    assert report["exit_code"] == 0 and report["summary"]["failed"] == 0, report["summary_line"]
    steps = _finding(report, "diffusion_steps")
    assert steps["status"] == "PASS" and "completed after 10/10 steps" in steps["message"]
    assert _finding(report, "manifest_integrity")["status"] == "PASS"


def test_audio_pipeline_writes_a_wav_with_the_pipeline_sample_rate(tmp_path: Path, tiny_audio: Path) -> None:
    result, snapshot = _in_process(tmp_path, diffusion_request(tiny_audio, name="song", steps=3))
    assert (result.status, result.generated, result.outputs) == ("succeeded", 3, ("audio_0.wav",))
    with wave.open(str(snapshot / "outputs" / "audio_0.wav")) as clip:
        # DanceDiffusion: stereo, unet.config.sample_rate 16 kHz, sample_size 1024 samples, 16-bit PCM
        assert (clip.getnchannels(), clip.getframerate(), clip.getnframes(), clip.getsampwidth()) == (2, 16000, 1024, 2)
    assert "  outputs/audio_0.wav\n" in (snapshot / layout.MANIFEST).read_text()


def test_output_kinds_are_saved_as_files(tmp_path: Path) -> None:
    """diffusers' own output classes: np images -> PNG, latents -> .npy (never a fake RGBA picture),
    video frames -> numbered PNGs, audio without a known rate -> .npy; non-media fields -> JSON."""
    import numpy as np
    from diffusers.pipelines.pipeline_utils import AudioPipelineOutput, ImagePipelineOutput
    from PIL import Image

    from genrun.runner.media import OTHER_FIELDS_FILE, save_output_fields

    rng = np.random.default_rng(0)
    images = ImagePipelineOutput(images=rng.random((2, 8, 8, 3), dtype=np.float32))
    assert save_output_fields(tmp_path, images, None) == ("image_0.png", "image_1.png")
    with Image.open(tmp_path / "image_1.png") as png:
        assert np.array_equal(np.asarray(png), (images.images[1] * 255).round().astype(np.uint8))
    latents = ImagePipelineOutput(images=rng.random((1, 4, 8, 8), dtype=np.float32))
    assert save_output_fields(tmp_path, latents, None, latents=True) == ("images.npy",)
    assert np.array_equal(np.load(tmp_path / "images.npy"), latents.images)
    frames = {"frames": [[Image.new("RGB", (4, 4), (i, 0, 0)) for i in range(3)]], "nsfw_content_detected": [False]}
    assert save_output_fields(tmp_path, frames, None) == ("video_0/frame_00000.png", "video_0/frame_00001.png",
                                                            "video_0/frame_00002.png", OTHER_FIELDS_FILE)
    assert orjson.loads((tmp_path / OTHER_FIELDS_FILE).read_bytes()) == {"nsfw_content_detected": [False]}
    audio = AudioPipelineOutput(audios=rng.uniform(-1, 1, (1, 2, 100)).astype(np.float32))
    assert save_output_fields(tmp_path, audio, None) == ("audios.npy",)  # a WAV with a guessed rate would lie about duration
    assert save_output_fields(tmp_path, audio, 8000) == ("audio_0.wav",)
    with wave.open(str(tmp_path / "audio_0.wav")) as clip:
        pcm = np.frombuffer(clip.readframes(100), dtype="<i2").reshape(100, 2).T
    assert np.array_equal(pcm, (audio.audios[0].astype(np.float64) * 32767).round().astype(np.int16))


# -- steps: the scheduler's real number of timesteps --------------------------------------------------------------


def test_pndm_callback_records_every_real_timestep_not_num_inference_steps(sd_run) -> None:
    result, snapshot = sd_run
    call = PipelineCallBeforeCall.model_validate_json((snapshot / layout.PIPELINE_CALL).read_bytes())
    assert (call.scheduler_class, call.step_observation) == ("PNDMScheduler", "callback_on_step_end")
    assert (call.num_inference_steps, call.timesteps_planned, call.guidance_scale) == (8, 9, 7.5)
    assert call.call_arguments["prompt"] == "count down"
    assert len(unit_records(snapshot)) == 9 and result.generated == 9  # PNDM (skip_prk_steps) runs 8 + 1 timesteps
    (stop,) = read_json(snapshot, layout.STOP)["sequences"]
    assert (stop["reason"], stop["generated"], stop["evidence"]["steps"]["steps_planned"]) == ("completed", 9, 9)
    assert events(snapshot)[0].planned_units == 9
    budget = read_json(snapshot, layout.TOKEN_BUDGET)
    assert (budget["requested_units"], budget["rows_per_request"]) == (8, 2)  # guidance 7.5 > 1: cond + uncond rows
    assert _verify(snapshot)["summary"]["failed"] == 0


def test_progress_bar_total_form_counts_updates(tmp_path: Path) -> None:
    """The `with self.progress_bar(total=n) as bar: ... bar.update()` loop of callback-less pipelines
    (StableAudio, AudioLDM2, PixArt): the real pipeline method and tqdm, driven the way those loops drive it."""
    from diffusers import DiffusionPipeline

    from genrun.runner.backends.diffusers.steps import StepObserver
    from genrun.runner.recorder import ProgressRecorder

    pipe = DiffusionPipeline.from_pretrained(TINY_DDIM, local_files_only=True)
    recorder = ProgressRecorder(SnapshotDir(tmp_path, writable=True).open_stream(layout.PROGRESS), origin=time.monotonic(), unit="step", every_units=1, every_seconds=30.0)
    observer = StepObserver(recorder, by_callback=False, fallback_planned=None, rows=1)
    observer.wrap_progress_bar(pipe)
    pipe.set_progress_bar_config(disable=True)
    with pipe.progress_bar(total=6) as bar:
        for _ in range(3):
            bar.update()
        bar.update(3)  # some loops update by the scheduler order
    recorder.end()
    assert (observer.loops, observer.planned, observer.steps) == (1, 6, 6)
    stream = events(tmp_path)
    assert stream[0].event == "start" and stream[0].planned_units == 6
    assert [e.generated for e in stream if e.event in ("first_token", "progress")] == [1, 2, 3, 6]


# -- stop reasons: interrupted (real signals), exception ----------------------------------------------------------


def _run_and_interrupt(tmp_path: Path, text: str) -> tuple[int, Path]:
    """Start `genrun run`, wait for a `progress` record, send SIGINT, wait for the exit."""
    store = tmp_path / "store"
    request = write_request(tmp_path, text)
    with open(tmp_path / "stderr.txt", "w") as err:  # a file, not a pipe: a full pipe would block the child
        proc = spawn_cli("run", request, "--store", store, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        snapshot = None
        while snapshot is None and time.monotonic() < deadline and proc.poll() is None:
            found = [p for p in store.iterdir() if not p.name.startswith(".")] if store.is_dir() else []
            if found and b'"event":"progress"' in ((found[0] / layout.PROGRESS).read_bytes() if (found[0] / layout.PROGRESS).is_file() else b""):
                snapshot = found[0]
            time.sleep(0.02)
        if snapshot is None:
            proc.kill()
            raise AssertionError(f"no progress record before exit/timeout: {(tmp_path / 'stderr.txt').read_text()[-2000:]}")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=PROCESS_TIMEOUT_S)
    return code, snapshot


def _assert_interrupted(snapshot: Path, planned: int) -> dict:
    assert is_sealed(snapshot)
    result = read_json(snapshot, layout.RESULT)
    assert (result["status"], result["exit_code"], result["signal"]) == ("interrupted", 130, "SIGINT")
    (stop,) = read_json(snapshot, layout.STOP)["sequences"]
    assert stop["reason"] == "interrupted" and stop["evidence"]["signal"] == "SIGINT"
    # however far the pipeline got before the signal landed, the evidence agrees on that count
    assert stop["generated"] < planned and stop["evidence"]["steps"]["steps_planned"] == planned
    assert stop["evidence"]["steps"]["steps_done"] == stop["generated"]
    stream = events(snapshot)
    assert stream[-1].event == "interrupted" and stream[-1].generated == stop["generated"] == result["generated"]
    assert all(e.generated <= stop["generated"] for e in unit_records(snapshot))  # the stream never counted past the stop
    check = subprocess.run(["sha256sum", "-c", "--quiet", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    assert _verify(snapshot)["summary"]["failed"] == 0
    return stop


def test_sigint_stops_a_progress_bar_pipeline_by_raising(tmp_path: Path) -> None:
    # DDIM has no step callback: the signal raises where it lands; 1000 steps would take far longer than the test
    code, snapshot = _run_and_interrupt(tmp_path, diffusion_request(TINY_DDIM, name="ddim-sigint", steps=1000))
    assert code == 130
    stop = _assert_interrupted(snapshot, planned=1000)
    assert stop["evidence"]["steps"]["output_returned"] is False and read_json(snapshot, layout.RESULT)["outputs"] == []


def test_sigint_sets_the_interrupt_flag_through_the_callback(tmp_path: Path, tiny_sd: Path) -> None:
    # PNDM: 999 requested steps are 1000 timesteps; the held signal sets pipe._interrupt in the next callback,
    # the loop skips the rest, the VAE decodes the partial latents, and the image is kept as evidence
    code, snapshot = _run_and_interrupt(tmp_path, diffusion_request(tiny_sd, name="sd-sigint", steps=999, prompt="count down"))
    assert code == 130
    stop = _assert_interrupted(snapshot, planned=1000)
    assert stop["evidence"]["interrupt_flag_set_at_step"] == stop["generated"]
    assert stop["evidence"]["steps"]["output_returned"] is True
    assert read_json(snapshot, layout.RESULT)["outputs"] == ["image_0.png"]


def test_exception_in_the_denoiser_is_recorded_with_steps_done(tmp_path: Path) -> None:
    # failing_loader: a real [model] loader whose UNet forward pre-hook raises on the 4th call (after 3 steps)
    text = diffusion_request(TINY_DDIM, name="ddim-fails", steps=10).replace('device = "cpu"', 'device = "cpu"\nloader = "failing_loader:load"')
    result, snapshot = _in_process(tmp_path, text, user_code=True)
    assert (result.status, result.exit_code, result.generated) == ("failed", 1, 3)
    assert result.exception is not None and result.exception.type == "failing_loader.InjectedFailure"
    (stop,) = read_json(snapshot, layout.STOP)["sequences"]
    assert (stop["reason"], stop["generated"], stop["evidence"]["steps"]["steps_planned"]) == ("exception", 3, 10)
    assert stop["exception"]["message"] == "injected failure in UNet call 4" and "fail_on_call" in stop["exception"]["traceback"]
    assert [e.event for e in events(snapshot)][-1] == "exception" and is_sealed(snapshot)
    assert result.outputs == ()
    report = _verify(snapshot)
    assert report["summary"]["failed"] == 0 and "exception after 3/10 steps" in _finding(report, "diffusion_steps")["message"]


# -- plan-time refusals and the memory pre-flight ------------------------------------------------------------------


def test_memory_preflight_refuses_with_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    # real numbers: a margin of 99.99 % of total memory can never be free
    request = write_request(tmp_path, diffusion_request(TINY_DDIM, name="too-big", tables="[budget]\nmemory_margin_fraction = 0.9999"))
    store = tmp_path / "store"
    with pytest.raises(BudgetRefused) as refused:
        plan_request(request, store=store)
    message = str(refused.value)
    assert refused.value.exit_code == 3  # what `genrun plan/run` exits with
    assert "memory_margin_fraction 0.9999" in message and "free" in message and "--force" in message
    assert "weights 2.7 MiB" in message  # 702,499 float32 parameters of the bundled UNet
    assert not store.exists()


def test_forced_plan_keeps_the_refusal_on_record(tmp_path: Path) -> None:
    request = write_request(tmp_path, diffusion_request(TINY_DDIM, name="forced", tables="[budget]\nmemory_margin_fraction = 0.9999"))
    budget = read_json(plan_request(request, store=tmp_path / "store", force=True), layout.TOKEN_BUDGET)
    assert budget["forced"] is True and budget["fits_memory"] is False
    assert len(budget["refusals"]) == 1 and "memory_margin_fraction 0.9999" in budget["refusals"][0]


def test_prompt_for_an_unconditional_pipeline_is_refused(tmp_path: Path) -> None:
    request = write_request(tmp_path, diffusion_request(TINY_DDIM, name="cat", prompt="a cat"))
    with pytest.raises(RequestError) as refused:
        plan_request(request, store=tmp_path / "store")
    assert refused.value.exit_code == 2
    assert "[input] prompt" in str(refused.value) and "DDIMPipeline" in str(refused.value)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(("line", "named"), [("return_dict = false", "return_dict"), ("generator = 3", "top-level 'seed'"),
                                             ("num_inference_steps = 0", "must be a positive integer")])
def test_keys_genrun_owns_or_bad_steps_are_refused(tmp_path: Path, line: str, named: str) -> None:
    text = diffusion_request(TINY_DDIM, name="owned", steps=None, generation=line)
    with pytest.raises(RequestError, match=named):
        plan_request(write_request(tmp_path, text), store=tmp_path / "store")


def test_weights_in_the_budget_equal_the_loaded_state_dict(tmp_path: Path) -> None:
    import torch
    from diffusers import DiffusionPipeline

    from genrun.runner.backends.diffusers.budget import estimate_diffusers_budget
    from genrun.runner.request_loading import load_request

    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        request = load_request(write_request(tmp_path, diffusion_request(TINY_DDIM, dtype=dtype), name=f"{dtype}.toml")).request
        budget = estimate_diffusers_budget(request, TINY_DDIM, 0, force=False)
        unet = DiffusionPipeline.from_pretrained(TINY_DDIM, local_files_only=True, dtype=torch_dtype).unet
        loaded = sum(t.numel() * t.element_size() for t in unet.state_dict().values())
        assert budget.weight_bytes == loaded, dtype
    assert loaded == 702_499 * 2


def test_guidance_doubles_rows_and_latents(tmp_path: Path, tiny_sd: Path) -> None:
    from genrun.runner.backends.diffusers.budget import estimate_diffusers_budget
    from genrun.runner.request_loading import load_request

    def budget(generation: str) -> TokenBudget:
        text = diffusion_request(tiny_sd, prompt="count down", generation=generation)
        return estimate_diffusers_budget(load_request(write_request(tmp_path, text)).request, tiny_sd, 0, force=False)

    single, guided = budget("guidance_scale = 1.0"), budget("guidance_scale = 5.0")
    assert (single.rows_per_request, guided.rows_per_request) == (1, 2)
    assert guided.activation_bytes_estimate == 2 * single.activation_bytes_estimate > 0
    # latents 4 channels x 8 x 8 x 4 bytes per row; activations x (64 / 4) x 8 feature maps
    assert single.activation_bytes_estimate == 4 * 8 * 8 * 4 * (1 + 16 * 8)
    larger = budget("guidance_scale = 1.0\nheight = 32\nwidth = 32")  # VAE factor 2: 16 x 16 latent cells
    assert larger.activation_bytes_estimate == 4 * single.activation_bytes_estimate


def test_auto_dtype_loads_what_the_checkpoint_stores(tmp_path: Path) -> None:
    import torch
    from diffusers import DiffusionPipeline

    # float16, not bfloat16: DDIMPipeline converts its output with .numpy(), which has no bfloat16
    stored = tmp_path / "ddim-fp16"
    DiffusionPipeline.from_pretrained(TINY_DDIM, local_files_only=True, dtype=torch.float16).save_pretrained(stored)
    result, snapshot = _in_process(tmp_path, diffusion_request(stored, name="auto", steps=2, dtype="auto"))
    assert result.status == "succeeded", result.exception
    assert read_json(snapshot, layout.PIPELINE_CALL)["dtype"] == "float16"  # diffusers alone would load float32
    assert read_json(snapshot, layout.TOKEN_BUDGET)["weight_bytes"] == 702_499 * 2


# -- diffusers is optional ---------------------------------------------------------------------------------------------

_BLOCK_DIFFUSERS = """
import importlib.abc, sys
attempts = []
class BlockDiffusers(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "diffusers" or name.startswith("diffusers."):
            attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, BlockDiffusers())
from genrun.runner.cli import main
code = main(sys.argv[1:])
print("DIFFUSERS_IMPORT_ATTEMPTS", len(attempts), file=sys.stderr)
sys.exit(code)
"""


def test_transformers_path_runs_without_diffusers(tmp_path: Path) -> None:
    """A meta-path finder makes `import diffusers` fail as if it were not installed."""

    def blocked(*args: str | Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _BLOCK_DIFFUSERS, *map(str, args)], cwd=REPO, capture_output=True,
                              text=True, timeout=PROCESS_TIMEOUT_S, env={**os.environ, "HF_HUB_OFFLINE": "1"})

    run = blocked("run", REPO / "examples" / "tiny.toml", "--store", tmp_path / "lm", "--json")
    assert run.returncode == 0, run.stderr
    assert orjson.loads(run.stdout)["result"]["status"] == "succeeded"
    assert "DIFFUSERS_IMPORT_ATTEMPTS 0" in run.stderr  # never even tried
    plan = blocked("plan", EXAMPLE, "--store", tmp_path / "diffusion")
    assert plan.returncode == 2 and "pip install 'genrun[diffusers]'" in plan.stderr
    assert not (tmp_path / "diffusion").exists()


def test_human_summary_speaks_in_steps(example_run, capsys: pytest.CaptureFixture[str]) -> None:
    from genrun.runner.cli.execute import render_summary

    _, snapshot = example_run
    render_summary(snapshot, Result.model_validate_json((snapshot / layout.RESULT).read_bytes()))
    summary = " ".join(capsys.readouterr().err.split())
    assert "pipeline call 0: completed after 10 of 10 steps" in summary
    assert "generated 10 steps" in summary and "first step" in summary and "tokens" not in summary
