"""The diffusers backend: pipelines (image, audio) run as one call per row, observed step by step.

`backend.py` is the plugin (its `create_backend` is the `genrun.backends` entry point); `loading.py`
loads the pipeline, `steps.py` observes the denoising loop, `stop.py` writes each row's stop record,
`budget.py` is the pre-flight budget and `_files.py` reads the pipeline's files without importing it.
Nothing here is imported by genrun's core: importing this package pulls in torch and diffusers.
"""
