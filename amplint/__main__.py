import sys

from amplint.cli import main

sys.exit(main())
