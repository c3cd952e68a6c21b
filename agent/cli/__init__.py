"""The `rlloop` command line (`agent.cli.commands`); `python -m agent.cli` runs it."""

from agent.cli.commands import main

__all__ = ["main"]
