"""The Slack adapter: Socket Mode events in, Web API replies out (slack-sdk)."""
