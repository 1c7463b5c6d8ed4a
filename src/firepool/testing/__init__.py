"""Factories for tests and benchmarks: real objects, built with fewer keystrokes."""
