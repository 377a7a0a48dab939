"""Attachments turned into what the model can read: transcripts, downscaled images and
document text.
"""
