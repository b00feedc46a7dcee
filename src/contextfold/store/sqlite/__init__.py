"""SQLite without SQLAlchemy's layers: the one-hop fast path of the async driver, which
`sql/engine` installs on every SQLite connection. It imports nothing else of the store (the
read-only `sqlite3` snapshot, which reads `sql/`'s rows, is `store/snapshot.py`).
"""
