import sys

from reflector_svc.cli import main

sys.exit(main())
