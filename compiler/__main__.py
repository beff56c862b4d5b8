"""python -m compiler: the same as the gpupolicy command."""

import sys

from compiler.cli import main

sys.exit(main())
