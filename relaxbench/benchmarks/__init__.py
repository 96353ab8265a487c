"""Benchmarks: scripts that print figures (never timed unit tests). Each exits non-zero when a target is missed."""
