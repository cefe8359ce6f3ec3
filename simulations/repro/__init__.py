"""Reproductions of the source papers' tables, one module per paper (see reproduce_engines.py)."""
