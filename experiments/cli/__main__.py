"""`python -m experiments.cli`, the same as the `specdash` console script."""

import sys

from .main import main

sys.exit(main())
