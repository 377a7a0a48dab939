"""A turn of the agent: the loop and its one error boundary, the prompt's context, chat
commands, stored tool steps, replays after a crash, and the outbox of owed answers.
"""
