"""``python -m runner``: see :mod:`runner._main`."""

from __future__ import annotations

from ._main import main

if __name__ == "__main__":
    main()
