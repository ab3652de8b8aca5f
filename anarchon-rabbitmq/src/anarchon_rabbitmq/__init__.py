"""anarchon-rabbitmq."""
