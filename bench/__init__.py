"""Benchmarks of memgate side by side with nanobot (issue 7): `make bench` or `python -m bench`.

Not tests: they print figures and write docs/benchmarks.md and docs/benchmarks.png. This package
must stay importable from nanobot's venv too, so nothing here imports memgate at module level
except the orchestrator modules that only the memgate venv runs.
"""
