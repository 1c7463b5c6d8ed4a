"""Experiments that run the real broker end to end (as opposed to the simulator's)."""
