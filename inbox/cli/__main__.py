import sys

from inbox.cli import main

sys.exit(main())
