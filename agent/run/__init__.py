"""One run's life, shared by the research loop and external agents: config, start-up, workspace, base models,
the grader process, MLflow tracking, reporting, interrupts, child processes, leftovers, the end of a run, results."""
