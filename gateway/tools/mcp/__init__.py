"""Tools from MCP servers: the servers kept connected in the background (or, for a one-shot chat,
started by the first call), their tools remembered per config, and the SDK's side of a connection."""
