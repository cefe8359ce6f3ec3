"""What the tests need beside the code under test: reading a child command's output with a
deadline (:mod:`tests.support.children`). The private PostgreSQL server the tests and the
benchmarks start is :mod:`simulations.postgres`, since the benchmarks may not import ``tests``."""
