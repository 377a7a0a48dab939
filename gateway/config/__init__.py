"""The configuration: the settings models, the file (finding, expanding, loading, writing),
and docs/configuration.md generated from the models.
"""
