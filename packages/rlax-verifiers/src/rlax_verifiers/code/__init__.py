"""The code judge: problems, code extraction, test harnesses, output comparison, verdicts."""
