"""The command line on top of everything: ``sandbox run``, ``doctor`` and ``bench``
(:mod:`._main`), ``serve`` (:mod:`._serve`) and ``agent`` (:mod:`._agent`), with the options
they share defined once (:mod:`._options`)."""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
