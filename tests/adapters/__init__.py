"""Adapter tests: each runs a real framework offline with its own test model."""
