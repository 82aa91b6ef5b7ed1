"""Reusable test suites for sandbox backends: the hostile-input suite."""
