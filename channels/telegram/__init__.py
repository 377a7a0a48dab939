"""The Telegram adapter on python-telegram-bot: its lifecycle, updates in, addressing,
attachments, replies out, HTML rendering and the handled-update file.
"""
