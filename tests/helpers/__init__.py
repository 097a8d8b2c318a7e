"""Helpers shared by tests (importable as `tests.helpers` from the repository root)."""
