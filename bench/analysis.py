"""Benchmark of post-mortem analysis on a long run: `genrun verify` and `genrun report` as whole processes.

Builds (once) a small random Llama whose context holds 65,536 new tokens and which has no EOS
configured, runs it for real with `genrun run` (`max_new_tokens = 65536`, greedy, progress every
256 tokens), then times `genrun verify SNAPSHOT` and `genrun report SNAPSHOT` as separate
processes (`python -m genrun.runner.cli ...`, output discarded), `--rounds` times each, interleaved,
and prints the medians. Targets: verify < 1 s, report < 2 s (median of 5). Exits 1 when missed.

The generation itself takes several minutes on a 2-core CPU (one torch thread); the snapshot is
kept in the work dir and reused by later runs (pass --fresh to make a new one).

    python bench/analysis.py                      # work dir bench/_work/analysis (git-ignored)
    python bench/analysis.py --snapshot DIR       # time an existing snapshot instead
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY_LM = REPO / "examples" / "models" / "tiny-lm"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DEFAULT_WORK = REPO / "bench" / "_work" / "analysis"
VERIFY_TARGET_S = 1.0
REPORT_TARGET_S = 2.0


def build_long_context_lm(out: Path, new_tokens: int) -> Path:
    """A ~0.1M-parameter random Llama (hidden 64, 2 layers) with room for `new_tokens` and no EOS id, built once."""
    if (out / "config.json").is_file():
        return out
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig

    tokenizer = AutoTokenizer.from_pretrained(TINY_LM)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=new_tokens + 128,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=None,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    # No EOS anywhere: generation runs to max_new_tokens, which is what this benchmark needs.
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy2(TINY_LM / name, out / name)
    # The bundled tokenizer declares a 256-token limit; genrun's context check uses the smaller of the two limits.
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = new_tokens + 128
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    return out


def write_request(work: Path, model: Path, new_tokens: int) -> Path:
    """The request of the long run (absolute model path, so it runs from any directory)."""
    path = work / "long.toml"
    path.write_text(
        f'name = "long-{new_tokens}"\nseed = 0\n\n[model]\npath = "{model}"\ndtype = "float32"\ndevice = "cpu"\n\n'
        f'[input]\nprompt = "count down from 40 :"\n\n[generation]\nmax_new_tokens = {new_tokens}\ndo_sample = false\n\n'
        f"[progress]\nevery_units = 256\nevery_seconds = 30.0\n"
    )
    return path


def make_snapshot(work: Path, new_tokens: int, fresh: bool) -> Path:
    """Reuse the newest sealed snapshot of the long run in `work/store`, or run one with the real CLI."""
    store = work / "store"
    if not fresh and store.is_dir():
        done = sorted(p for p in store.iterdir() if f"-long-{new_tokens}-" in p.name and (p / "manifest-sha256.txt").is_file())
        if done:
            return done[-1]
    model = build_long_context_lm(work / f"random-lm-{new_tokens}", new_tokens)
    request = write_request(work, model, new_tokens)
    print(f"generating {new_tokens:,} tokens with {model} (several minutes on CPU)...", flush=True)
    started = time.perf_counter()
    # One intra-op thread: for a model this small, two threads on a 2-core machine that is busy
    # with anything else spin against each other and run ~6x slower (measured: 255 vs 39 tokens/s).
    proc = subprocess.run([sys.executable, "-m", "genrun.runner.cli", "run", str(request), "--store", str(store), "--json"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        sys.exit(f"genrun run failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}")
    import orjson

    snapshot = Path(orjson.loads(proc.stdout)["snapshot"])
    print(f"  done in {time.perf_counter() - started:.1f} s: {snapshot}", flush=True)
    return snapshot


def time_command(args: list[str]) -> tuple[float, int]:
    """Wall seconds of one whole process, and its exit code."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "genrun.runner.cli", *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "COLUMNS": "120"})
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        sys.exit(f"genrun {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return elapsed, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="work directory (model, request, store)")
    parser.add_argument("--tokens", type=int, default=65536, help="new tokens of the long run")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each command")
    parser.add_argument("--snapshot", type=Path, help="time this snapshot instead of making one")
    parser.add_argument("--fresh", action="store_true", help="make a new snapshot even if one exists")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    snapshot = args.snapshot or make_snapshot(args.work, args.tokens, args.fresh)

    sys.path.insert(0, str(REPO))
    from genrun.analysis import read_snapshot

    snap = read_snapshot(snapshot, hash_files=False)
    ids = sum(len(a) for a in (snap.token_ids or {}).values())
    records = len(snap.progress.events) if snap.progress else 0
    print(f"snapshot {snapshot.name}: {ids:,} generated token ids, {records} progress records, "
          f"{sum(f.size for f in snap.files.values()):,} bytes in {len(snap.files)} files")

    startup = [time_python_startup() for _ in range(args.rounds)]
    verify, report, codes = [], [], set()
    for _ in range(args.rounds):  # interleaved, so drift affects both alike
        seconds, code = time_command(["verify", str(snapshot)])
        verify.append(seconds)
        codes.add(code)
        report.append(time_command(["report", str(snapshot)])[0])
    rows = [("python -c pass (interpreter start)", startup, None), ("genrun verify SNAPSHOT", verify, VERIFY_TARGET_S),
            ("genrun report SNAPSHOT", report, REPORT_TARGET_S)]
    missed = []
    print(f"\n{'command':<36} {'median':>8} {'min':>8} {'max':>8}  target")
    for label, values, target in rows:
        median = statistics.median(values)
        verdict = "" if target is None else (f"< {target:.0f} s  {'met' if median < target else 'MISSED'}")
        print(f"{label:<36} {median:>7.3f}s {min(values):>7.3f}s {max(values):>7.3f}s  {verdict}")
        if target is not None and median >= target:
            missed.append(label)
    print(f"(median of {args.rounds}; verify exit code(s) {sorted(codes)}: 0 = no FAIL)")
    if missed:
        print(f"targets missed: {', '.join(missed)}")
        return 1
    return 0


def time_python_startup() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
