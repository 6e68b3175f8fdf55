"""The transformers backend: language, speech and audio models driven through `generate`.

`backend.py` is the plugin (its `create_backend` is the `genrun.backends` entry point); `instrument/`
patches `generate` to record what it was called with and why each row stopped (the token ids and texts are
written by `genrun.backends.save_token_rows`, as for every backend that keeps ids); `budget.py` and `length_rules.py` are the pre-flight budget. Nothing
here is imported by genrun's core: importing this package pulls in torch and transformers.
"""
