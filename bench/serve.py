"""`genrun serve` vs `vllm serve`: the same model, the same client load, side by side in one run.

Both servers start once (vLLM's defaults: an engine-core process each, `VLLM_CPU_KVCACHE_SPACE` GiB of KV cache, eager
mode, float32) and listen on the loopback address only. The load is the issue's: `--requests` completions (default 64) of
exactly `--tokens` tokens (default 128: `ignore_eos`, greedy), `--concurrency` (default 16) in flight at once, from the
official `openai` client (threads, one client per server). The sides alternate `--rounds` times (vllm, genrun, vllm,
genrun, ...): the machine is shared, so each genrun round is compared with the faster of the vllm rounds on either side
of it (the conservative choice: a vllm round slowed by a load that came and went never makes genrun look better), and
the median ratio is the figure. Tokens/s = the completion tokens the answers report over the round's wall time
(first request sent to last answer received). The load average is printed beside every round.

Every genrun answer is then checked outside the timing: its `x-genrun-snapshot` names a distinct snapshot, sealed
`succeeded`, whose `genrun verify` has no FAIL and whose `outputs/sequence_0.txt` is the text the answer carried.

Usage (the vLLM environment; genrun installed in it):
    python bench/serve.py [--requests 64] [--tokens 128] [--concurrency 16] [--rounds 3] [--model DIR]
Goal: genrun serve at >= 0.80 of vllm serve's tokens/s.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUNDLED_MODEL = REPO / "examples" / "models" / "tiny-vllm-lm"
GOAL = 0.80
START_TIMEOUT_S = 600
REQUEST_TIMEOUT_S = 600
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # both at vLLM's default: an engine-core process
    return env


def start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=environment(), start_new_session=True)


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> float:
    import httpx

    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT_S:
        if process.poll() is not None:
            sys.exit(f"server exited {process.returncode}; see {log}")
        try:
            if httpx.get(f"http://{HOST}:{port}/health", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)
    process.terminate()
    sys.exit(f"server not ready after {START_TIMEOUT_S} s; see {log}")


def load_round(port: int, model: str, requests: int, tokens: int, concurrency: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """One round of the client load; `(figures, [(snapshot header, text)])`."""
    import openai

    client = openai.OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key="unused", timeout=REQUEST_TIMEOUT_S, max_retries=0)

    def one(i: int) -> tuple[int, str, str]:
        raw = client.completions.with_raw_response.create(model=model, prompt=f"Count: {i}", max_tokens=tokens, temperature=0,
                                                           extra_body={"ignore_eos": True})
        completion = raw.parse()
        return completion.usage.completion_tokens, raw.headers.get("x-genrun-snapshot", ""), completion.choices[0].text

    load = os.getloadavg()[0]
    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(one, range(requests)))
    seconds = time.monotonic() - started
    generated = sum(a[0] for a in answers)
    return ({"generated": generated, "seconds": round(seconds, 3), "tokens_per_s": round(generated / seconds, 1),
             "load": [round(load, 2), round(os.getloadavg()[0], 2)]}, [(a[1], a[2]) for a in answers])


def check_snapshots(store: Path, answers: list[tuple[str, str]]) -> dict[str, Any]:
    """Every answer's snapshot: distinct, sealed `succeeded`, verified, holding the answered text."""
    import genrun

    names = [name for name, _ in answers]
    problems = []
    if len(set(names)) != len(names) or "" in names:
        problems.append(f"{len(set(names))} distinct snapshot ids for {len(names)} answers")
    for name, text in answers:
        snapshot = store / name
        result = json.loads((snapshot / "result.json").read_text())
        if result["status"] != "succeeded":
            problems.append(f"{name}: {result['status']}")
        failed = [f.name for f in genrun.verify(snapshot).findings if f.status == "FAIL"]
        if failed:
            problems.append(f"{name}: verify FAIL {failed}")
        if (snapshot / "outputs" / "sequence_0.txt").read_text() != text:
            problems.append(f"{name}: the answered text differs from outputs/sequence_0.txt")
    return {"snapshots": len(answers), "problems": problems[:10], "problem_count": len(problems)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    args = parser.parse_args()
    model_dir = args.model.resolve()
    work = Path(tempfile.mkdtemp(prefix="genrun-bench-serve-"))
    store = work / "store"
    request = work / "serve.toml"
    request.write_text(f'name = "bench-serve"\nseed = 0\n\n[model]\npath = {json.dumps(str(model_dir))}\nbackend = "vllm"\n'
                       'dtype = "float32"\ndevice = "cpu"\n\n[engine]\nenforce_eager = true\n')
    python = sys.executable
    vllm_port, genrun_port = free_port(), free_port()
    vllm_log, genrun_log = work / "vllm-serve.log", work / "genrun-serve.log"
    servers = {
        # `vllm serve`'s server module (vllm-cpu's distribution is not named `vllm`, which the `vllm` command's --version reads)
        "vllm": start([python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", HOST, "--port", str(vllm_port),
                       "--dtype", "float32", "--enforce-eager", "--served-model-name", "bench-serve", "--seed", "0"], vllm_log),
        "genrun": start([python, "-m", "genrun", "serve", str(request), "--store", str(store), "--host", HOST, "--port", str(genrun_port)],
                        genrun_log),
    }
    report: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model": str(model_dir),
                              "requests": args.requests, "tokens": args.tokens, "concurrency": args.concurrency, "cpus": os.cpu_count()}
    try:
        report["start_s"] = {"vllm": round(wait_ready(servers["vllm"], vllm_port, vllm_log), 1),
                             "genrun": round(wait_ready(servers["genrun"], genrun_port, genrun_log), 1)}
        ports = {"vllm": vllm_port, "genrun": genrun_port}
        for side in ("vllm", "genrun"):  # warm-up (first-request costs: genrun's code hash, vLLM's first batch shapes)
            load_round(ports[side], "bench-serve", args.concurrency, 8, args.concurrency)
        rounds: list[tuple[str, dict[str, Any]]] = []
        answers: list[tuple[str, str]] = []
        order = ["vllm"] + ["genrun", "vllm"] * args.rounds
        for side in order:
            figures, got = load_round(ports[side], "bench-serve", args.requests, args.tokens, args.concurrency)
            rounds.append((side, figures))
            print(f"{side:7s} {figures}", file=sys.stderr, flush=True)
            if side == "genrun":
                answers += got
        ratios = []
        for i, (side, figures) in enumerate(rounds):
            if side == "genrun":
                faster = max(rounds[i - 1][1]["tokens_per_s"], rounds[i + 1][1]["tokens_per_s"])
                ratios.append(figures["tokens_per_s"] / faster)
        report["rounds"] = [{"side": side, **figures} for side, figures in rounds]
        report["ratios"] = [round(r, 3) for r in ratios]
        report["ratio_median"] = round(statistics.median(ratios), 3)
        report["goal"] = GOAL
        report["snapshots"] = check_snapshots(store, answers)
    finally:
        for process in servers.values():
            process.terminate()
        for process in servers.values():
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
    report["exit_codes"] = {side: p.returncode for side, p in servers.items()}
    print(json.dumps(report, indent=2))
    return 0 if report["ratio_median"] >= GOAL and report["snapshots"]["problem_count"] == 0 else 1


if __name__ == "__main__":
    threading.current_thread().name = "bench-serve"
    sys.exit(main())
