import sys

from processor_svc.cli import main

sys.exit(main())
