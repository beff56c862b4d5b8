"""python -m cli: the same as the gpupolicy command."""

import sys

from cli.main import main

sys.exit(main())
