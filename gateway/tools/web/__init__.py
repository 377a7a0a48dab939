"""The web tools: web_fetch behind its guard, web_search through a provider, and the wrapper that
marks what they bring back as untrusted."""
