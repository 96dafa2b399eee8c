"""The command line: ``demo``, ``build FILE``, ``eval`` and the stored-conversation commands."""

from ._main import main

__all__ = ["main"]
