"""End-to-end tests against real trace backends, run by ``make e2e``."""
