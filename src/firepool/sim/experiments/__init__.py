"""Experiments: each turns cells (workload x arm x seed) into JSON, a markdown table and a plot."""
