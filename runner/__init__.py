"""genrun's runner: request loading, planning, execution, the snapshot store and the CLI.

Heavy imports (torch, transformers, diffusers) happen inside the functions that need them,
so `genrun ls`, `verify` and `report` start fast.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("genrun")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0.0.0+unknown"
