"""`python -m genrun ...` runs the `genrun` command line."""

import sys

from genrun.runner.cli import main

sys.exit(main())
