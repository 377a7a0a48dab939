"""The chat model behind the agent: the openai SDK behind the `ChatProvider` seam, its types
and errors, and streamed replies put back together.
"""
