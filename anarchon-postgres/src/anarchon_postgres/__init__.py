"""anarchon-postgres."""
