"""Tests for loopscribe."""
