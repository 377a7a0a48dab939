"""Memory search: the index of memory files and sessions, keyword and vector ranking,
`memory_get`, the model's tools and the CLI's display.
"""
