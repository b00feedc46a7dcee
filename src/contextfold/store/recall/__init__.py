"""Recall over a stored session (SPEC L1-L4): the full-text index kept with the nodes, its queries,
their arguments, the re-derived hits, and the in-memory search.
"""
