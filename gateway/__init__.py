"""memgate: a self-hosted gateway between chat platforms and an LLM agent with Markdown memory.

Importing this package imports nothing else, so `channels/` can depend on `gateway.bus` alone.
"""

__version__ = "0.1.0"
