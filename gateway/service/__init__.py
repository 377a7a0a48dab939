"""`memgate run` as a service: wiring a runtime, the run itself, the control socket,
health and metrics, the workspace lock and SIGHUP's access reload.
"""
