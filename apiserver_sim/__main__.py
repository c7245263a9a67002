"""``python -m apiserver_sim``: the ``apiserver-sim`` command."""

import sys

from apiserver_sim.command import main

sys.exit(main())
