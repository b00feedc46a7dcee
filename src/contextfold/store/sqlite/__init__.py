"""SQLite without SQLAlchemy's layers: the one-hop fast path of the async driver, and the read-only
snapshot through the standard library's sqlite3.
"""
