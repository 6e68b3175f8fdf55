"""A real `[model] loader` for the exception test: the pipeline's UNet raises on its 4th call.

So exactly 3 denoising steps complete before the failure: the stop record must say
`exception` with 3 steps done of the planned ones. A forward pre-hook is how user code would
break a model too (a buggy hook, an adapter); nothing here is mocked.
"""

from diffusers import DiffusionPipeline

FAIL_AT_CALL = 4


class InjectedFailure(RuntimeError):
    """Raised by the hook; the test finds this class name in the stop record."""


def load(path: str, dtype: str, device: str, fail_at_call: int = FAIL_AT_CALL) -> tuple[DiffusionPipeline, None]:
    """`fn(path, dtype, device, **loader_kwargs)` -> `(pipeline, None)`."""
    pipe = DiffusionPipeline.from_pretrained(path, local_files_only=True)
    pipe.to(device)
    calls = 0

    def fail_on_call(module, args):
        nonlocal calls
        calls += 1
        if calls == fail_at_call:
            raise InjectedFailure(f"injected failure in UNet call {calls}")

    pipe.unet.register_forward_pre_hook(fail_on_call)
    return pipe, None
