"""What the faces show about a session: where the next request's tokens go, and why a compaction ran
and what it paid.
"""
