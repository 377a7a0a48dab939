"""What the model can do: the tool registry, the file tools confined to a scope, MCP servers
as tools, the job tools and memory search as configured.
"""
