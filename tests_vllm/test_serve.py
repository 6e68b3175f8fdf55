"""`genrun serve`: the official `openai` client against a real server on the loopback address, and every answer one sealed
snapshot that verifies and holds the answered text.

One server serves the whole module (its engine start is the slow part): tiny-vllm-lm copied with a chat template added,
a 40-block KV cache (so holding capacity is reachable: 409 and "can never fit" 400), an API key, a 64 KiB body limit, at
vLLM's default VLLM_ENABLE_V1_MULTIPROCESSING=1 (an engine-core process, which SIGTERM must stop). The SIGTERM test,
the last to use it, stops it (a test run alone starts its own); the SIGKILL test starts a server of its own.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import openai
import pytest
from _engine_processes import engine_core_under, process_states
from _snapshot import problems
from conftest import MODEL, toml_value

KEY = "test-key-0123456789"
KV_BLOCKS = 40
"""Of 128 tokens each: a 1,008-token row holds 8."""
BODY_LIMIT = 64 * 1024
START_TIMEOUT_S = 600
ANSWER_TIMEOUT_S = 300
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


class Server(NamedTuple):
    process: subprocess.Popen[bytes]
    url: str
    store: Path
    log: Path
    commits: Path
    """The module server's group-commit steps, one JSON line each (`_COMMIT_AUDIT`)."""


_COMMIT_AUDIT = """
import json, sys
from genrun.runner import group_commit
LOG = sys.argv.pop(1)
def hook(event, args):
    if event == group_commit.AUDIT_EVENT:
        with open(LOG, "a") as log:
            log.write(json.dumps(args) + "\\n")
sys.addaudithook(hook)
from genrun.runner.cli import main
sys.exit(main())
"""
"""`python -c` of the module's server: genrun's command line with an audit hook that logs each `genrun.group_commit` step
(`sys.audit` events genrun raises for the fault-injection tests) to the file named by its first argument."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _base_request(directory: Path) -> Path:
    """tiny-vllm-lm with a chat template (a copy: the bundled tokenizer has none), served greedily by default."""
    import shutil

    model = directory / "tiny-vllm-chat"
    shutil.copytree(MODEL, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}, indent=2))
    request = directory / "serve.toml"
    request.write_text(f'name = "tiny-serve"\nseed = 0\n\n[model]\npath = {toml_value(str(model))}\nbackend = "vllm"\n'
                       'dtype = "float32"\ndevice = "cpu"\n\n[generation]\ntemperature = 0\n\n'
                       f"[engine]\nenforce_eager = true\nnum_gpu_blocks_override = {KV_BLOCKS}\n")
    return request


def _serve_command(request: Path, store: Path, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "genrun", "serve", str(request), "--store", str(store), "--port", str(port), *extra]


def _environment(**changes: str) -> dict[str, str]:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **changes}
    env.pop("GENRUN_API_KEY", None)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("serve")
    port, store, log, commits = _free_port(), directory / "store", directory / "serve.log", directory / "group-commit.ndjson"
    command = _serve_command(_base_request(directory), store, port, "--api-key", KEY, "--max-body-bytes", str(BODY_LIMIT))
    command[1:3] = ["-c", _COMMIT_AUDIT, str(commits)]  # `python -m genrun` with the audit hook
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=_environment())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while b"genrun serve: tiny-serve on" not in log.read_bytes():
        assert process.poll() is None, f"genrun serve exited {process.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"genrun serve not ready after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
    yield Server(process, url, store, log, commits)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _client(server: Server, key: str = KEY) -> openai.OpenAI:
    """The official client; never retrying (it retries 409 and 5xx by default: a refusal must be seen as one)."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, timeout=ANSWER_TIMEOUT_S, max_retries=0)


def _snapshots(server: Server) -> set[str]:
    return {p.name for p in server.store.iterdir() if not p.name.startswith(".")} if server.store.is_dir() else set()


def _sealed_text(server: Server, snapshot: str, row: int = 0) -> str:
    return (server.store / snapshot / "outputs" / f"sequence_{row}.txt").read_text()


def _result(server: Server, snapshot: str) -> dict[str, Any]:
    return json.loads((server.store / snapshot / "result.json").read_text())


def _request_of(server: Server, snapshot: str) -> dict[str, Any]:
    return json.loads((server.store / snapshot / "request.json").read_text())


# --- answers -----------------------------------------------------------------------------------------------------------


def test_a_completion_is_one_sealed_snapshot_holding_the_answered_text(server: Server) -> None:
    raw = _client(server).completions.with_raw_response.create(model="tiny-serve", prompt="Count: 3", max_tokens=8)
    completion = raw.parse()
    snapshot = raw.headers["x-genrun-snapshot"]
    assert completion.model_extra["genrun"]["snapshot"] == snapshot
    assert completion.object == "text_completion" and completion.model == "tiny-serve"
    assert completion.choices[0].text == _sealed_text(server, snapshot)
    assert completion.choices[0].finish_reason == "length"  # OpenAI's word ...
    assert completion.model_extra["genrun"]["stop_reasons"] == ["max_new_tokens"]  # ... and genrun's
    assert completion.usage.completion_tokens == 8 and completion.usage.total_tokens == 8 + completion.usage.prompt_tokens
    assert _result(server, snapshot)["status"] == "succeeded"
    request = _request_of(server, snapshot)
    assert request["input"]["prompt"] == "Count: 3" and request["generation"] == {"temperature": 0, "max_tokens": 8}
    assert problems(server.store / snapshot) == []


def test_the_models_list_names_the_served_model(server: Server) -> None:
    models = _client(server).models.list()
    assert [m.id for m in models.data] == ["tiny-serve"]
    assert models.data[0].model_extra["max_model_len"] == 1024


def test_chat_renders_the_checkpoints_template_and_answers_the_snapshot_text(server: Server) -> None:
    raw = _client(server).chat.completions.with_raw_response.create(
        model="tiny-serve", max_tokens=6, seed=7, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    chat = raw.parse()
    snapshot = raw.headers["x-genrun-snapshot"]
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == _sealed_text(server, snapshot)
    request = _request_of(server, snapshot)
    if request["input"].get("messages"):  # a vllm backend that renders chat itself: the messages go through as given
        assert request["input"]["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    else:  # serve rendered the checkpoint's template: the snapshot holds the text the model was given
        assert request["input"]["prompt"] == "<system>Be brief.\n<user>Hi\n<assistant>"
    assert request["seed"] == 7
    assert problems(server.store / snapshot) == []


def test_streaming_sends_the_sealed_text_as_server_sent_events(server: Server) -> None:
    client = _client(server)
    chunks = list(client.completions.create(model="tiny-serve", prompt="Count: 5", max_tokens=7, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    ends = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert len(ends) == 1 and ends[0].choices[0].finish_reason == "length"
    snapshot = ends[0].model_extra["genrun"]["snapshot"]
    assert text == _sealed_text(server, snapshot)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    chat = list(client.chat.completions.create(model="tiny-serve", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    end = [c for c in chat if c.choices and c.choices[0].finish_reason is not None]
    assert content == _sealed_text(server, end[0].model_extra["genrun"]["snapshot"])
    assert problems(server.store / snapshot) == []


def test_32_requests_at_once_are_32_distinct_snapshots_that_verify(server: Server) -> None:
    client = _client(server)

    def one(i: int) -> tuple[str, str, str]:
        raw = client.completions.with_raw_response.create(model="tiny-serve", prompt=f"Count: {i}", max_tokens=16)
        return raw.headers["x-genrun-snapshot"], raw.parse().choices[0].text, f"Count: {i}"

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(one, range(32)))
    assert len({snapshot for snapshot, _, _ in answers}) == 32
    for snapshot, text, prompt in answers:
        assert _request_of(server, snapshot)["input"]["prompt"] == prompt
        assert text == _sealed_text(server, snapshot)
        assert _result(server, snapshot)["status"] == "succeeded"
        assert problems(server.store / snapshot) == [], snapshot
        # each ran on the server's one engine, loaded at start (execute notes the reuse)
        assert any(note.startswith("the model was loaded once before this run and reused") for note in _result(server, snapshot)["notes"])


def test_served_requests_are_made_durable_and_sealed_in_groups(server: Server) -> None:
    """As a sweep worker's items: each request's files are synced by its group's one syncfs before its seal, not each alone."""
    client = _client(server)
    with ThreadPoolExecutor(8) as pool:
        snapshots = list(pool.map(lambda i: client.completions.with_raw_response.create(
            model="tiny-serve", prompt=f"Group: {i}", max_tokens=8).headers["x-genrun-snapshot"], range(8)))
    steps = [json.loads(line) for line in server.commits.read_text().splitlines()] if server.commits.exists() else []
    for snapshot in snapshots:
        path = str(server.store / snapshot)
        assert ["queued", path] in steps, f"{snapshot} was sealed alone, not in a group commit"
        queued = steps.index(["queued", path])
        synced = next(i for i, step in enumerate(steps) if step[0] == "files-synced" and path in step[2])
        sealed = steps.index(["seal", path])
        manifests = next(i for i, step in enumerate(steps) if step[0] == "manifests-synced" and path in step[2])
        assert queued < synced < sealed < manifests, (snapshot, steps)
        assert _result(server, snapshot)["status"] == "succeeded" and problems(server.store / snapshot) == []


# --- refusals ----------------------------------------------------------------------------------------------------------


def test_an_unknown_field_is_400_with_did_you_mean_and_writes_nothing(server: Server) -> None:
    client, before = _client(server), _snapshots(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="tiny-serve", prompt="Count: 1", extra_body={"max_token": 8})
    assert "unknown field 'max_token'" in str(refused.value) and "did you mean 'max_tokens'?" in str(refused.value)
    assert refused.value.body["param"] == "max_token"
    with pytest.raises(openai.BadRequestError, match="logprobs=2 is not supported"):
        client.completions.create(model="tiny-serve", prompt="Count: 1", logprobs=2)
    with pytest.raises(openai.BadRequestError, match="belongs to /v1/chat/completions"):
        client.completions.create(model="tiny-serve", prompt="Count: 1", extra_body={"messages": []})
    with pytest.raises(openai.NotFoundError, match="`other` does not exist"):
        client.completions.create(model="other", prompt="Count: 1")
    assert _snapshots(server) == before


def test_a_request_that_can_never_fit_is_400_naming_the_limit(server: Server) -> None:
    client, before = _client(server), _snapshots(server)
    with pytest.raises(openai.BadRequestError, match="context limit 1,024"):
        client.completions.create(model="tiny-serve", prompt="Count: 1", max_tokens=2000)
    with pytest.raises(openai.BadRequestError, match=f"need 48 KV blocks of 128 tokens, more than the engine's {KV_BLOCKS}"):
        client.completions.create(model="tiny-serve", prompt="Count: 1", max_tokens=1000, n=6, temperature=1.0)
    assert _snapshots(server) == before


def test_a_request_that_does_not_fit_beside_those_in_flight_is_409_with_retry_after(server: Server) -> None:
    """A holds 4 rows x 8 blocks of the 40 while it runs; B (2 x 8) would fit alone, not beside it."""
    client, before = _client(server), _snapshots(server)
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(client.completions.create(
        model="tiny-serve", prompt="Count: 1", max_tokens=1000, n=4, temperature=1.0, extra_body={"ignore_eos": True})))
    holder.start()
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while not _snapshots(server) - before:  # A's snapshot is frozen once its hold is taken
        assert time.monotonic() < deadline and holder.is_alive()
        time.sleep(0.02)
    refused = httpx.post(f"{server.url}/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=ANSWER_TIMEOUT_S,
                         json={"model": "tiny-serve", "prompt": "Count: 2", "max_tokens": 1000, "n": 2, "temperature": 1.0})
    holder.join(ANSWER_TIMEOUT_S)
    assert refused.status_code == 409, refused.text
    assert refused.headers["retry-after"] == "1"
    assert "16 KV blocks needed" in refused.json()["error"]["message"]
    (snapshot,) = _snapshots(server) - before  # B wrote nothing
    assert first and first[0].model_extra["genrun"]["snapshot"] == snapshot
    assert _result(server, snapshot)["status"] == "succeeded"


def test_the_api_key_is_checked_on_every_request(server: Server) -> None:
    with pytest.raises(openai.AuthenticationError):
        _client(server, key="wrong-key").completions.create(model="tiny-serve", prompt="Count: 1", max_tokens=2)
    assert httpx.get(f"{server.url}/health").status_code == 401
    assert httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer " + KEY[:-1]}).status_code == 401
    assert httpx.get(f"{server.url}/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_a_body_over_the_limit_is_413(server: Server) -> None:
    before = _snapshots(server)
    answer = httpx.post(f"{server.url}/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                        json={"model": "tiny-serve", "prompt": "x" * BODY_LIMIT, "max_tokens": 1})
    assert answer.status_code == 413 and "larger than 65,536 bytes" in answer.json()["error"]["message"]
    assert _snapshots(server) == before


def test_a_public_address_without_an_api_key_is_refused_before_loading(tmp_path: Path) -> None:
    request = tmp_path / "serve.toml"
    request.write_text(f'name = "x"\n[model]\npath = {toml_value(str(MODEL))}\nbackend = "vllm"\n')
    done = subprocess.run(_serve_command(request, tmp_path / "store", _free_port(), "--host", "0.0.0.0"), env=_environment(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0 listens beyond this machine: give --api-key KEY (or set GENRUN_API_KEY)" in done.stderr
    assert not (tmp_path / "store").exists()


# --- operations (last: this stops the module's server) -----------------------------------------------------------------


def test_sigterm_seals_every_request_in_flight_interrupted_and_stops_the_engine_core(server: Server) -> None:
    before = _snapshots(server)
    core = engine_core_under(server.process.pid)
    assert core is not None, "the server runs its engine in an engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=1)"
    answers: list[httpx.Response] = []

    def long_request(i: int) -> None:
        answers.append(httpx.post(f"{server.url}/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=ANSWER_TIMEOUT_S,
                                  json={"model": "tiny-serve", "prompt": f"Count: {i}", "max_tokens": 1000, "ignore_eos": True}))

    threads = [threading.Thread(target=long_request, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while sum((server.store / s / "progress.ndjson").exists() for s in _snapshots(server) - before) < 3:  # all three running
        assert time.monotonic() < deadline, "three requests never ran"
        time.sleep(0.02)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(ANSWER_TIMEOUT_S)
    assert server.process.wait(ANSWER_TIMEOUT_S) == 143, server.log.read_text()[-3000:]
    new = _snapshots(server) - before
    assert sorted(a.status_code for a in answers) == [503, 503, 503], [a.text for a in answers]
    assert {a.headers["x-genrun-snapshot"] for a in answers} == new
    for snapshot in new:
        result = _result(server, snapshot)
        assert (result["status"], result["signal"]) == ("interrupted", "SIGTERM")
        assert (server.store / snapshot / "manifest-sha256.txt").is_file()
        assert problems(server.store / snapshot, allowed_warns=("completeness",)) == [], snapshot  # WARN: partial outputs
    assert process_states({core}) == {core: "gone"}, "the engine core outlived the server"


def test_sigkill_leaves_the_requests_in_flight_unsealed_and_ls_says_so(tmp_path: Path) -> None:
    """A server of its own (its engine in-process: what outlives a SIGKILLed engine-core parent is the vLLM backend's
    watchdog's business, not this test's)."""
    port, store, log = _free_port(), tmp_path / "store", tmp_path / "serve.log"
    process = subprocess.Popen(_serve_command(_base_request(tmp_path), store, port), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                               env=_environment(VLLM_ENABLE_V1_MULTIPROCESSING="0"))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"genrun serve: tiny-serve on" not in log.read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/v1/completions"
        body = {"model": "tiny-serve", "prompt": "Count: 0", "max_tokens": 1000, "ignore_eos": True}
        threads = [threading.Thread(target=lambda: _posted(url, body), daemon=True) for _ in range(2)]
        for thread in threads:
            thread.start()
        while sum((store / s / "progress.ndjson").exists() for s in (os.listdir(store) if store.is_dir() else ())) < 2:
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.02)
        process.kill()
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    listed = subprocess.run([sys.executable, "-m", "genrun", "ls", "--store", str(store), "--json"], capture_output=True, text=True,
                            timeout=120, env=_environment())
    rows = json.loads(listed.stdout)["snapshots"]
    assert len(rows) == 2 and all(not row["sealed"] and row["state"] in ("running", "incomplete") for row in rows), rows


def _posted(url: str, body: dict[str, Any]) -> None:
    try:
        httpx.post(url, json=body, timeout=ANSWER_TIMEOUT_S)
    except httpx.HTTPError:  # the server was killed: no answer is the point
        pass
