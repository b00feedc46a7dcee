"""`SqlSessionStore` on SQLite or PostgreSQL (SQLAlchemy Core): where the database is, its tables
and migrations, rows, reads, writes, leases and tenants.
"""
