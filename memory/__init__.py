"""Sessions, memory files, token counting, consolidation and search.

Imports neither `gateway` nor `channels`; the model is reached through interfaces defined here.
"""
