"""Benchmarks, arrival profiles, the simulation driver and paper reproductions."""
