"""The simulator: the real control plane (`control/`, `scheduling/`) driven in virtual time.

`loop` is the clock, `venue` and `backend` stand in for pods, `broker` executes the control
plane's decisions exactly as the service does, `training` runs elastic jobs in rounds through
the round policies, and `experiments/` turn workloads into JSON, tables and plots.
"""
