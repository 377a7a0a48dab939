"""Platform adapters. Each imports only `gateway.bus` of ours, plus its own SDK."""
