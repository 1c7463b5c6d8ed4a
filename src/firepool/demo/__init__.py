"""`firepool demo`: the broker paper's loop experiments, live, on this machine."""
