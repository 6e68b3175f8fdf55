"""Sweeps: many items, each an ordinary snapshot, run by workers that keep the model loaded.

`spec` reads the sweep file and expands items; `store` plans them and owns the sweep snapshot;
`driver` schedules, retries and seals; `local` / `ray_executor` are the pools; `worker` is the
item loop both pools run (`execute_item`); `model_cache` is the loaded-once hook.
"""
