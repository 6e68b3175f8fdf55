"""Example backends shipped with genrun, to read and to register from your own distribution (see `genrun.backends`)."""
