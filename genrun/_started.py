"""When genrun's code began to run in this process (`genrun/__init__.py` imports this module first).

The process's own start (`/proc/self/stat`) is not enough: a shell that runs genrun as its last command execs it
in its own process (`bash -c 'sleep 8; genrun run ...'`), so that start includes whatever the shell ran before.
"""

import time

MONOTONIC = time.monotonic()
"""`time.monotonic()` at genrun's first import."""
