"""Verification: the one place that says whether two runs give the same answer."""
