"""anarchon-sqlite: the embedded SQLite backend."""
