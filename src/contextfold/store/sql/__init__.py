"""The SQL store's machinery on SQLite or PostgreSQL (SQLAlchemy Core): where the database is,
its tables and migrations, rows, reads and writes, leases and tenants; and the parts
`contextfold.store.sql_store.SqlSessionStore` is composed of, each over one `SqlAccess`.
This folder never imports `store/recall/` (which reads it).
"""
