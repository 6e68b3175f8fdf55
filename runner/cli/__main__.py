import sys

from genrun.runner.cli import main

sys.exit(main())
