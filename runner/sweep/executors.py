"""Pick the pool `[sweep.executor] kind` asks for."""

from genrun.schemas.sweep import SweepPlan

from .pools import WorkerPool


def make_pool(plan: SweepPlan) -> WorkerPool:
    """`local`: worker processes; `ray`: actors (needs the `genrun[ray]` extra). Either runs one item at a time per worker,
    or, where the items' backend batches them itself (`lanes_per_worker`: vLLM), that many at once per worker on its one
    loaded model."""
    from .batch_pool import lanes_per_worker

    executor = plan.sweep.executor
    lanes = lanes_per_worker(plan)  # a backend that batches items itself runs many per worker on one loaded model
    if executor.kind == "ray":
        from .ray_executor import RayPool

        return RayPool(executor, lanes)
    from .batch_pool import BatchPool
    from .local import LocalPool

    return BatchPool(executor.workers, lanes) if lanes > 1 else LocalPool(executor.workers)
