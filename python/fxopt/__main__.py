"""`python -m fxopt`: the same command line as the `fxopt` console script."""

import sys

from .cli.main import main

sys.exit(main())
