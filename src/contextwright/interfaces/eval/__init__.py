"""Evaluation: how much of what a question needs does a small context bring back (LoCoMo)."""
