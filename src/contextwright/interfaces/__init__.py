"""Interfaces: the ways in from outside (the command line, evaluation); each stands on the service."""
