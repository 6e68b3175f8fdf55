"""Reading what a vLLM snapshot recorded (through genrun's public readers)."""

import json
from pathlib import Path
from typing import Any


def stops(snapshot: Path) -> list[dict[str, Any]]:
    """`generation-stop.json` rows."""
    return json.loads((snapshot / "generation-stop.json").read_text())["sequences"]


def ids(snapshot: Path) -> dict[int, list[int]]:
    """Saved ids per row."""
    from safetensors.numpy import load_file

    tensors = load_file(str(snapshot / "generated-token-ids.safetensors"))
    return {int(name.rsplit("_", 1)[1]): tensors[name].tolist() for name in tensors}


def findings(snapshot: Path) -> dict[str, tuple[str, str]]:
    """check name -> (status, message) from genrun's own verify."""
    import genrun

    return {f.name: (f.status, f.message) for f in genrun.verify(snapshot).findings}


def problems(snapshot: Path, allowed_warns: tuple[str, ...] = ()) -> list[str]:
    """Every FAIL, and every WARN not in `allowed_warns`."""
    return [f"{name}: {status}: {message}" for name, (status, message) in findings(snapshot).items()
            if status == "FAIL" or (status == "WARN" and name not in allowed_warns)]
