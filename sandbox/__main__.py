"""``python -m sandbox``: the command line."""

from __future__ import annotations

import sys

from ._commands._main import main

sys.exit(main())
