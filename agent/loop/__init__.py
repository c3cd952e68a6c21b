"""The research loop: its graph, nodes and driver, and the steps the nodes call (training a trial, validating it,
the submission policy, concurrent trials, the code check, approvals)."""
