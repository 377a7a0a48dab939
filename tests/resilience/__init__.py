"""Resilience suites: crashes, injected faults, bad input, properties and secrets (issue 9).

`harness.py` runs `memgate run` as a child process against the fakes; `crash.py` is the crash run
shared with `bench/soak.py`, which repeats it at a larger scale.
"""
