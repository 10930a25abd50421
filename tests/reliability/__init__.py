"""Reliability tests: injected faults, an unreliable collector, concurrent load."""
