"""Tokens: the `TokenCounter` protocol, exact counters, the CJK-aware estimate, truncation."""
