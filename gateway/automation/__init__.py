"""What runs without a message: scheduled jobs, the scheduler that runs them, the heartbeat,
and their clock.
"""
