"""The pipeline: `ContextEngine` and its stages (plan, fetch, fit, assemble, render) and the receipt."""
