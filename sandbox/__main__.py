"""``python -m sandbox``: the command line."""

from __future__ import annotations

import sys

from ._cli import main

sys.exit(main())
