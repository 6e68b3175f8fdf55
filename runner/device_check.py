"""Is the requested `[model] device` there? Refuse at plan time instead of torch's raw
`AssertionError: Torch not compiled with CUDA enabled` when the model is moved to it."""

from .errors import RequestError


def available_devices() -> tuple[str, ...]:
    """`cpu`, then `cuda:0` … `cuda:N-1` as this torch sees them."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ("cpu", *(f"cuda:{i}" for i in range(count)))


def require_device(device: str) -> None:
    """RequestError (exit 2) naming the device, what is available, and the fix, when `device` cannot be used here."""
    if device in ("auto", "cpu"):
        return
    import torch

    wanted = "cuda:0" if device == "cuda" else device
    available = available_devices()
    if wanted in available:
        return
    if len(available) == 1:
        why = (f"this torch ({torch.__version__}) was built without CUDA" if torch.version.cuda is None
               else f"this torch ({torch.__version__}, CUDA {torch.version.cuda}) finds no CUDA device")
    else:
        why = f"this machine has {len(available) - 1} CUDA device(s)"
    raise RequestError(
        f"[model] device = {device!r} is not available: {why}; available: {', '.join(available)}. "
        f'Set device = "auto" (or one of the available devices), or run where {wanted} exists'
    )
