"""Recall (SPEC L): the index and query text, the recall tools' definitions and the recall that
comes by itself.
"""
