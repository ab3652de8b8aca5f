"""anarchon-conformance: the certification kit for anarchon backends."""
