import sys

from trio_broker.cli import main

sys.exit(main())
