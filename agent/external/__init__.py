"""External agents: a run driven by an outside agent (AutoRL-Bench layout) instead of the research loop."""
