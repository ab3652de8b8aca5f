"""anarchon-nats."""
