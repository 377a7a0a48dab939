"""Consolidation: the queue and its workers, the chunk policy, the forced `save_memory`
call, the entries it writes, per-session backoff and compaction of MEMORY.md.
"""
