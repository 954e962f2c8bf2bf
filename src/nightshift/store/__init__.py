"""Persistence: SQLAlchemy tables, Alembic migrations and the repositories that map rows to domain types."""
