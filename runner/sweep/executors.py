"""Pick the pool `[sweep.executor] kind` asks for."""

from genrun.schemas.sweep import SweepPlan

from .pools import WorkerPool


def make_pool(plan: SweepPlan) -> WorkerPool:
    """`local`: worker processes; `ray`: actors (needs the `genrun[ray]` extra)."""
    executor = plan.sweep.executor
    if executor.kind == "ray":
        from .ray_executor import RayPool

        return RayPool(executor)
    from .local import LocalPool

    return LocalPool(executor.workers)
