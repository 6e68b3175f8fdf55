"""The Ray executor (`genrun[ray]`): one actor per worker, each keeping one model loaded.

Actors reserve `num_cpus` / `num_gpus` as the sweep asks; the store must be a path every node
sees (a shared filesystem), since actors write item snapshots there directly. With
`address = None` the driver starts a local Ray instance (`ray.init()`), otherwise it joins the
cluster (`"auto"` on a cluster node, `ray://head:10001` through Ray Client). An actor that dies
mid-item (killed, node lost) surfaces as `RayActorError` and the driver retries the item as a new
snapshot on a fresh actor.

An actor runs one item at a time, unless the items' backend batches them itself (`lanes > 1`, from
`batch_pool.lanes_per_worker`, as the local executor): then each actor has `lanes` slots (slot `s`
is lane `s % lanes` of actor `s // lanes`, as in `BatchPool`) and is a threaded actor
(`BatchActor`, `max_concurrency` = lanes + `CONTROL_CALLS`) holding one `BatchWorker`: each item
runs on its own Ray thread through the one loaded model's batch (vLLM's continuous batching). An
actor that dies loses the items of all its busy lanes (each a `Died`); the first `replace` of its
lanes starts one fresh actor for all of them, the others find it running.

SIGINT, one item per actor: Ray cannot interrupt a running method of a regular actor (`ray.cancel`
only sets a flag the method would have to poll), so the driver interrupts an item the way the local
executor does: a real SIGINT to the actor's process, sent by a tiny Ray task pinned to the actor's
node (the actor reports its node and pid when it starts). The item's own `execute_snapshot` handles
it and seals the item `interrupted`; one that lands while the actor still loads the model for the
item leaves the item `not_run` (`worker.start_worker`), as with the local executor.

SIGINT, a batching actor: a signal's Python handler would run only on the actor's main thread,
which sits in Ray's own loop, so the driver calls the actor's `interrupt` method instead (once per
actor; it runs beside the items, on a spare thread): every item in flight seals `interrupted` with
its ids, an item not yet started is `not_run` (`BatchWorker.interrupt`, what a local batching
worker does on SIGINT).
"""

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genrun.schemas.sweep import ExecutorSpec

from ..errors import RequestError
from .ownership import TOKEN_VAR
from .pools import Died, Finished
from .worker import ItemReport

RELEASE_TIMEOUT_S = 30.0
"""How long `close` waits for idle actors to free their kept models (an engine's shutdown) before killing them."""

RAY_EXTRA = "pip install 'genrun[ray]'"
INTERRUPT_TIMEOUT_S = 60  # an actor still starting when SIGINT comes: wait this long for it to say where it runs
CONTROL_CALLS = 2
"""Threads a batching actor keeps beyond its lanes, so `interrupt` and `release` run while every lane holds an item."""
INTERRUPT_SIGNAL = "SIGINT"
"""What a batching actor's items record as the signal that stopped them: the driver passes any stop on as SIGINT."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RequestError(f"[sweep.executor] kind = 'ray' needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


class SweepActor:
    """The actor body: `start_worker` once, then `execute_item` per call (wrapped by `ray.remote` at runtime)."""

    def __init__(self, name: str) -> None:
        from .worker import start_worker

        # Ray blocks SIGINT in every thread of a worker; unblocked here (the actor's main thread, where its methods run)
        # it reaches the item's `execute_snapshot`, whose gate handles it; outside a run `start_worker`'s handler notes it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self.name = name
        start_worker(name)

    def run(self, snapshot: str) -> Any:
        from .worker import execute_item

        return execute_item(snapshot)

    def release(self) -> None:
        """Free the kept model before the actor is killed (a kill runs no exit hooks: vLLM's engine core would live on)."""
        from .worker import release_kept_model

        release_kept_model()

    def where(self) -> tuple[str, int]:
        """`(node id, pid)`: where the driver sends SIGINT to interrupt this actor's running item."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()


class BatchActor:
    """The actor body for items whose backend batches them: one `BatchWorker` (one kept model, one open batch); each
    `run` call is an item on its own Ray thread (a threaded actor, wrapped by `ray.remote(max_concurrency=...)`)."""

    def __init__(self, name: str) -> None:
        from .batch_worker import BatchWorker
        from .worker import start_worker

        start_worker(name)
        self.worker = BatchWorker(name)

    def run(self, snapshot: str) -> Any:
        return self.worker.run(Path(snapshot))

    def interrupt(self, signal_name: str) -> None:
        """Stop every item in flight (sealed `interrupted` with its ids); later ones are `not_run`. Again: harmless."""
        self.worker.interrupt(signal_name)

    def release(self) -> None:
        """Close the batch and free the kept model before the actor is killed (vLLM's engine core would live on)."""
        self.worker.close()


def send_sigint(pid: int) -> None:
    """Run as a Ray task pinned to an actor's node: the same SIGINT a local worker gets from its driver."""
    os.kill(pid, signal.SIGINT)


@contextlib.contextmanager
def _sigterm_handler_kept() -> Iterator[None]:
    """`ray.init` replaces the SIGTERM handler with one raising `SystemExit`, which Python can swallow where it lands
    (inside a logging lock's release it is only printed as "Exception ignored"): the signal would be lost and the sweep
    run on. Its call is refused while `ray.init` runs, so the driver's own handler (note the signal, stop scheduling,
    seal `interrupted`) sees a SIGTERM that comes while Ray starts."""
    original = signal.signal

    def keep_sigterm(signum: int, handler: Any) -> Any:
        return signal.getsignal(signum) if signum == signal.SIGTERM else original(signum, handler)

    signal.signal = keep_sigterm  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = original


class RayPool:
    """`workers` actors with `lanes` slots each: one in-flight item per slot."""

    def __init__(self, spec: ExecutorSpec, lanes: int = 1) -> None:
        self._ray = ray = _import_ray()
        self.started_ray = False
        try:
            self._start(spec, lanes)
        except BaseException:  # a failed or interrupted start: stop what was started
            if self.started_ray:
                ray.shutdown()
            raise

    def _start(self, spec: ExecutorSpec, lanes: int) -> None:
        ray = self._ray
        if not ray.is_initialized():
            # A local instance when no address is given: the test suite and a laptop need no cluster. Its processes
            # inherit the driver's environment (its ownership token); a cluster's actors get the token from the job's
            # runtime environment, so that a later driver can find those on its own machine.
            carried = {k: os.environ[k] for k in (TOKEN_VAR,) if k in os.environ}
            self.started_ray = True
            with _sigterm_handler_kept():
                ray.init(address=spec.address, include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", **carried}} if spec.address else None)
        options = {"num_cpus": 1 if spec.num_cpus is None else spec.num_cpus, "num_gpus": spec.num_gpus or 0, "max_restarts": 0}
        self.lanes = lanes
        if lanes > 1:  # a threaded actor: each item on its own thread, and threads to spare for `interrupt` and `release`
            self._actor_class = ray.remote(**options, max_concurrency=lanes + CONTROL_CALLS)(BatchActor)
        else:
            self._actor_class = ray.remote(**options)(SweepActor)
        self.slots = spec.workers * lanes
        self._generation = [0] * spec.workers
        self._names = [f"ray-{i}" for i in range(spec.workers)]
        """Per actor (a slot's actor is `slot // lanes`)."""
        self._send_sigint = ray.remote(num_cpus=0, max_retries=0)(send_sigint)
        self._actors: list[Any] = []
        self._where: list[Any] = []
        """Per actor, the ref of its `where()` (asked once when it starts; actor calls run in order); one-item actors only."""
        self._inflight: dict[Any, tuple[int, str, str]] = {}
        """Per item's ref: its slot, snapshot and the actor it was handed to (a lane's `Died` may come after `replace`)."""
        self._ran_on = [0] * self.slots
        """Per slot, the generation of the actor its latest item was handed to (`replace` starts one actor per death)."""
        self._interrupted: set[tuple[int, int]] = set()
        """`(actor, generation)` of batching actors already asked to `interrupt` (one call stops all their items)."""
        self._signals: list[Any] = []
        """Refs of the SIGINT tasks and `interrupt` calls sent (kept so they are not dropped before they run)."""
        for name in self._names:
            self._start_actor(name)

    def _start_actor(self, name: str, index: int | None = None) -> None:
        actor = self._actor_class.remote(name)
        where = actor.where.remote() if self.lanes == 1 else None
        if index is None:
            self._actors.append(actor)
            self._where.append(where)
        else:
            self._actors[index], self._where[index] = actor, where

    def names(self) -> list[str]:
        return [self._names[slot // self.lanes] for slot in range(self.slots)]

    def submit(self, slot: int, snapshot: str) -> None:
        index = slot // self.lanes
        self._ran_on[slot] = self._generation[index]
        self._inflight[self._actors[index].run.remote(snapshot)] = (slot, snapshot, self._names[index])

    def wait(self, timeout: float) -> list[Finished | Died]:
        if not self._inflight:
            return []
        ready, _ = self._ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=timeout)
        events: list[Finished | Died] = []
        for ref in ready:
            slot, snapshot, name = self._inflight.pop(ref)
            try:
                events.append(Finished(slot, self._ray.get(ref)))
            except self._ray.exceptions.RayActorError as exc:  # every busy lane of a dead actor ends here, each a `Died`
                events.append(Died(slot, f"actor {name} died mid-item: {str(exc).splitlines()[0]}"))
            except self._ray.exceptions.RayError as exc:  # genrun itself raised in the actor: the item failed, the actor lives
                message = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                events.append(Finished(slot, ItemReport(snapshot, "failed", message, name, -1)))
        return events

    def replace(self, slot: int) -> None:
        """A fresh actor for the slot's dead one; for a batching actor's other lanes it finds that fresh one running."""
        index = slot // self.lanes
        if self._ran_on[slot] != self._generation[index]:  # its actor was already replaced for another lane
            return
        try:
            self._ray.kill(self._actors[index])
        except Exception:  # noqa: BLE001 (already dead is the normal case here)
            pass
        self._generation[index] += 1
        self._names[index] = f"ray-{index}.{self._generation[index]}"
        self._start_actor(self._names[index], index)

    def interrupt(self, slot: int) -> None:
        """Stop the slot's item, best effort (an actor that died is reported by `wait`): a batching actor's `interrupt`
        (once per actor: it stops all its items), else SIGINT to the actor process, on its node."""
        index = slot // self.lanes
        if self.lanes > 1:
            if (index, self._generation[index]) not in self._interrupted:
                self._interrupted.add((index, self._generation[index]))
                self._signals.append(self._actors[index].interrupt.remote(INTERRUPT_SIGNAL))
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            node, pid = self._ray.get(self._where[index], timeout=INTERRUPT_TIMEOUT_S)
        except self._ray.exceptions.RayError:
            return
        pinned = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        self._signals.append(self._send_sigint.options(scheduling_strategy=pinned).remote(pid))

    def close(self) -> None:
        busy = {slot // self.lanes for slot, _, _ in self._inflight.values()}  # interrupted items: their actors are killed without waiting
        releases = [actor.release.remote() for index, actor in enumerate(self._actors) if index not in busy]
        if releases:
            self._ray.wait(releases, num_returns=len(releases), timeout=RELEASE_TIMEOUT_S)
        for actor in self._actors:
            self._ray.kill(actor)
        if self.started_ray:
            self._ray.shutdown()
