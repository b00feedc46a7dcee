"""Audits of a store: the tables derived from the nodes checked against them, the whole-store
invariants and `verify_tree`.
"""
