"""Sessions: a conversation's JSONL file (format, read, append with group commit), its
index, its messages held from the pointer on, and the store of them all.
"""
