"""`python -m conformance`: see conformance/run.py."""

import sys

from conformance.run import main

sys.exit(main())
