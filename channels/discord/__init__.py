"""The Discord adapter on discord.py: its lifecycle, reaching Discord, reading messages and
live replies.
"""
