"""`python -m agent.service`: the same as `rlloop serve`."""

from agent.service.cli import main

main()
