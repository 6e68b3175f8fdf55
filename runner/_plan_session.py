"""Facts every item of one sweep shares, computed once while the sweep is planned.

Planning a sweep checks each item as strictly as `genrun plan` does (its request, model path,
entry points, budget from its own prompt), but some inputs of those checks are the same for every
item planned in one process a few seconds apart: the environment (package versions, git state),
the hash of genrun's own code, a model directory's config and tokenizer. Inside `plan_session()`
`once(key, compute)` computes each of them once; outside it (`genrun plan`, `execute`) it always
computes, so a single plan is exactly what it was.
"""

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

T = TypeVar("T")

_memo: dict[Hashable, object] | None = None


@contextlib.contextmanager
def plan_session() -> Iterator[None]:
    """Share `once()` values until the block ends (nested sessions share the outer one's)."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, or inside a session the value it gave for `key` the first time (a failure is never kept)."""
    if _memo is None:
        return compute()
    if key not in _memo:
        _memo[key] = compute()
    return _memo[key]  # type: ignore[return-value]
