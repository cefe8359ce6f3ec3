"""What the tests need beside the code under test: servers they start for themselves (a
private PostgreSQL server: :mod:`tests.support.postgres`). The benchmarks under
``simulations/`` that need the same server import it from here (they run from the repository
root)."""
