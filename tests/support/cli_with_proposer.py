"""`python -m tests.support.cli_with_proposer MODULE:CLASS <rlloop args>`: the real `rlloop` CLI in a child process
with one test proposer registered under its `name`. A kill -9 test needs its run in a child process, and a
proposer whose trials do not depend on what the built-in search happens to draw."""

from __future__ import annotations

import importlib
import sys

from agent.cli.commands import main
from agent.proposers import PROPOSERS


def _register(spec: str) -> None:
    module, _, attr = spec.partition(":")
    proposer = getattr(importlib.import_module(module), attr)
    PROPOSERS.register(proposer.name, lambda config, budget: proposer(), replace=True)


if __name__ == "__main__":
    _register(sys.argv[1])
    sys.argv = ["rlloop", *sys.argv[2:]]
    main()
