"""The Matrix adapter: a matrix-nio client whose /sync events become `InboundMessage`s."""
