import sys

try:
    from genrun.runner.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python imports genrun: nothing has been written yet
    sys.exit(130)

sys.exit(main())
