"""Pick the pool `[sweep.executor] kind` asks for."""

from genrun.schemas.sweep import SweepPlan

from .pools import WorkerPool


def make_pool(plan: SweepPlan) -> WorkerPool:
    """`local`: worker processes (several items at once each where the items' backend batches them); `ray`: actors, one
    item at a time each (needs the `genrun[ray]` extra)."""
    executor = plan.sweep.executor
    if executor.kind == "ray":
        from .ray_executor import RayPool

        return RayPool(executor)
    from .batch_pool import BatchPool, lanes_per_worker
    from .local import LocalPool

    lanes = lanes_per_worker(plan)  # a backend that batches items itself runs many per worker on one loaded model
    return BatchPool(executor.workers, lanes) if lanes > 1 else LocalPool(executor.workers)
