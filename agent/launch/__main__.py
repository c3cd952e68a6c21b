"""`python -m agent.launch FILE`: launch the run a `LaunchRequest` file describes (the service's run workers)."""

import sys

from agent.launch import main

sys.exit(main(sys.argv[1:]))
