"""`PlanContext`: the reads one plan (or one sweep plan) shares: once per key, thread-safe, failures never kept."""

import threading
from pathlib import Path

import pytest

from genrun.runner.backends.transformers._checkpoint_config import checkpoint_config, checkpoint_generation_config, checkpoint_tokenizer
from genrun.runner.code_identity import genrun_code_set
from genrun.runner.plan_context import PlanContext


def test_a_value_is_computed_once_per_context_and_a_failure_is_never_kept() -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    context = PlanContext()
    assert (context.cached("k", compute), context.cached("k", compute)) == (1, 1)
    assert PlanContext().cached("k", compute) == 2  # another plan computes its own

    def fail() -> int:
        raise ValueError("unreadable")

    with pytest.raises(ValueError, match="unreadable"):
        context.cached("bad", fail)
    assert context.cached("bad", compute) == 3  # the failure was not kept: computed again


def test_threads_asking_for_one_key_at_once_share_one_computation() -> None:
    context = PlanContext()
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow() -> object:
        calls.append("slow")
        started.set()
        assert release.wait(60)
        return object()

    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(context.cached("shared", slow))) for _ in range(4)]
    threads[0].start()
    assert started.wait(60)  # the first thread is computing; the others arrive while it does
    for thread in threads[1:]:
        thread.start()
    # Another key is not held up by the computation in progress.
    assert context.cached("other", lambda: "free") == "free"
    release.set()
    for thread in threads:
        thread.join(60)
    assert calls == ["slow"] and len(results) == 4 and all(r is results[0] for r in results)


def test_environment_and_genrun_code_are_captured_once() -> None:
    context = PlanContext()
    assert context.environment() is context.environment()
    assert context.genrun_code() is context.genrun_code()
    assert context.genrun_code() == genrun_code_set()  # the same hash a plan without the context computes


def test_configs_are_handed_out_as_copies_and_the_tokenizer_is_shared(tiny_lm: Path) -> None:
    context = PlanContext()
    first = checkpoint_config(context, tiny_lm, False)
    first.vocab_size = -1  # a caller's change stays its own
    assert checkpoint_config(context, tiny_lm, False).vocab_size != -1
    generation = checkpoint_generation_config(context, tiny_lm)
    generation.max_new_tokens = 12345
    assert checkpoint_generation_config(context, tiny_lm).max_new_tokens != 12345
    assert checkpoint_tokenizer(context, tiny_lm, False) is checkpoint_tokenizer(context, tiny_lm, False)
    assert checkpoint_tokenizer(PlanContext(), tiny_lm, False) is not checkpoint_tokenizer(context, tiny_lm, False)


def test_a_bounded_context_drops_the_value_asked_for_least_recently() -> None:
    """`genrun serve` plans every request of its life with one context: each request's own reads (its prompt) must not pile
    up, while the facts every request asks for stay."""
    context, computed = PlanContext(keep=2), []

    def value(key: str) -> str:
        return context.cached(key, lambda: computed.append(key) or key.upper())

    assert [value("shared"), value("prompt-1"), value("shared"), value("prompt-2"), value("shared"), value("prompt-1")] == \
        ["SHARED", "PROMPT-1", "SHARED", "PROMPT-2", "SHARED", "PROMPT-1"]
    assert computed == ["shared", "prompt-1", "prompt-2", "prompt-1"]  # "shared" kept (asked for last), prompt-1 dropped once
