"""`make bench`: what the bridge costs, and how far it is from the floor (see `python -m tests.bench -h`)."""
