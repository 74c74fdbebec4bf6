"""``python -m bounds_lib`` — same as the ``bounds-lib`` console script (:mod:`bounds_lib.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
