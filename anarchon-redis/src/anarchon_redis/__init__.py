"""anarchon-redis."""
