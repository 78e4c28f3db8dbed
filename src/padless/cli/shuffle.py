"""``padless shuffle``: shuffle a file bigger than memory, uniformly and safely.

The options and the run live in ``padless._cli_shuffle`` for now (being edited alongside the
shuffle package); this module is the subcommand's place in the CLI package.
"""

from __future__ import annotations

from .._cli_shuffle import add_arguments, run

__all__ = ["add_arguments", "run"]
