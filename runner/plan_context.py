"""What one plan reads once: the environment, genrun's code hash, and a backend's cached checkpoint reads.

`genrun plan` makes one `PlanContext`; `genrun sweep plan` makes one for the whole sweep and every item
is planned with it, so the facts all items share (package versions and git state, the hash of genrun's
own code, a model directory's config and tokenizer) are computed once for all items a few seconds apart,
while each item's own facts (its request, entry points, prompt, budget) stay its own. The backend's
plan-time methods (`validate_request`, `estimate_budget`) receive it and cache their reads through
`cached`.

Values are computed at most once per key, also when several threads ask at the same time; a
computation that raises is never cached (the next caller computes again). `cached` hands out the
shared value: a caller that may mutate it copies it (`backends/transformers/_checkpoint_config.py` does).
"""

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar, cast

from genrun.schemas import CodeSet, Environment

from .runtime import NEUTRAL_RUNTIME, Runtime

T = TypeVar("T")


class PlanContext:
    """Cached reads shared by everything one plan (or one sweep plan) checks.

    `keep`: at most this many values, the least recently asked for dropped first (`genrun serve` plans every request of
    its life with one context: its prompts must not pile up); `None` keeps every value (one plan, one sweep)."""

    def __init__(self, keep: int | None = None) -> None:
        self._keep = keep
        self._values: dict[Hashable, object] = {}
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()  # guards the two dicts; a computation holds only its key's lock

    def cached(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()` the first time `key` is asked for, the same value afterwards (a failure is not kept)."""
        with self._lock:
            if key in self._values:
                if self._keep is not None:
                    self._values[key] = self._values.pop(key)  # the most recently asked for last
                return cast(T, self._values[key])
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # a second thread asking for the same key waits for the first one's value
            with self._lock:
                if key in self._values:
                    return cast(T, self._values[key])
            value = compute()
            with self._lock:
                self._values[key] = value
                while self._keep is not None and len(self._values) > self._keep:
                    oldest = next(iter(self._values))
                    del self._values[oldest]
                    self._key_locks.pop(oldest, None)
            return value

    def environment(self, runtime: Runtime = NEUTRAL_RUNTIME) -> Environment:
        """Package versions, git state, platform (`environment.json`) as the backend's `runtime` sees them, captured once per
        runtime."""
        from .environment import capture_environment

        return self.cached(("genrun", "environment", id(runtime)), lambda: capture_environment(runtime))

    def genrun_code(self) -> CodeSet:
        """The hash of genrun's own source files (`code.json` `genrun`), computed once."""
        from .code_identity import genrun_code_set

        return self.cached(("genrun", "code"), genrun_code_set)
