"""pytest plugin of the conformance kit (filled in by the kit's issue)."""
