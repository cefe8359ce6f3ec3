"""Compile every numba kernel once, into numba's on-disk cache.

The kernels compile on first use (``cache=True``): a few seconds each, about a minute for all
of them on two cores. A process that finds them in the cache loads them in milliseconds.
Several processes that start together (a test run's workers, a service's compute pool) would
each compile the same kernels at once; ``python -m streamanon.warmup`` compiles them first, in
one or a few processes, so that those find them in the cache.

It runs every registered engine and incremental stage, and the refinement, on small random
data, with the array types the engines pass their kernels; an engine that needs parameters
to run (per-record inputs) or to reach all its kernels says which in its registry entry
(``warmup``).

One signature per kernel
------------------------
numba compiles a kernel once for each tuple of argument types it is called with, and what it
compiles for a kernel another one calls is compiled again, callees and all, for each new tuple.
Inside the kernels a bare constant is a type of its own (``0`` is ``Literal[int](0)``, ``True``
``Literal[bool](True)``), and so, while numba types a loop, is a counter that starts at ``0``
before it: each compiled the callee once more (MDAV's screening pass twice, ONA*'s split four
times). So a kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, not ``0`` or
``True``, and a counter it passes on starts as ``np.int64(0)``; the engines hand their kernels
float64 C-contiguous writable matrices (:func:`streamanon.engines.base.kernel_matrix`), int64
labels and Python numbers. Every kernel then has one signature, the one compiled here
(``tests/test_signatures.py``): a first MDAV run on the military survey compiles 118
functions instead of 131, a first ONA* run 199 instead of 250 (the others left are numba's
own, ``np.empty`` and the like, compiled once for each type they are used with).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: Records and columns of the data each engine runs on (enough for every code path to be
#: compiled: several cells, a last cell, splits of large cells).
N, M, K = 240, 3, 3


def _data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((N, M))


def _engines(names: tuple[str, ...]) -> None:
    from streamanon.engines import get_engine, run_engine

    X = _data()
    for name in names:
        tags = get_engine(name).engine  # an engine's own: its per-record inputs, say
        warmup = None if tags is None else tags.warmup
        run_engine(name, X, K, **(warmup(X) if warmup is not None else {}))


def _stages() -> None:
    from streamanon.engines import run_engine
    from streamanon.incremental import available_stages, run_stage
    from streamanon.metrics import distortion, fit_and_standardise
    from streamanon.refine import refine

    X = _data(2)
    base, increment = X[:180], X[180:]
    base_labels = run_engine("mdav", base, K)
    for entry in available_stages():
        labels = run_stage(entry.name, base, base_labels, increment, K)
    run_stage("nn_split_end", base, base_labels, increment, K, index="blocks")
    run_stage("nn_split_end", base, base_labels, increment, K, engine="mondrian")  # its split
    refine(X, labels, K, max_rounds=2)  # no time budget: a cold start spends it compiling
    distortion(X, labels)  # the loss's cell means and sums of squares
    fit_and_standardise(X)


#: The engines that run ONA*'s kernels (MONA runs ONA* on each part): in one group, so that
#: two groups compiling at once do not both compile ONA*.
LOCAL_SEARCH = ("ona_star", "mdav_star", "mona", "mona_2d")


def _local_search() -> None:
    _engines(LOCAL_SEARCH)
    _attacks()


def _the_rest() -> None:
    from streamanon.engines import available_engines

    _engines(tuple(e.name for e in available_engines() if e.name not in LOCAL_SEARCH))
    _stages()


def _attacks() -> None:
    """anonymeter's distance kernels, when the ``risk`` extra is installed
    (:func:`streamanon.attacks._cache_kernels`)."""
    import pandas as pd

    from streamanon.attacks import _anonymeter, attack_risk
    from streamanon.schema import FieldSpec, Schema

    if _anonymeter() is None:
        return
    rng = np.random.default_rng(3)
    schema = Schema(fields={"a": FieldSpec(role="quasi_identifier", type="float"),
                            "b": FieldSpec(role="quasi_identifier", type="category"),
                            "c": FieldSpec(role="confidential", type="int")})

    def table(n: int) -> pd.DataFrame:
        return pd.DataFrame({"a": rng.standard_normal(n), "b": rng.choice(["x", "y"], n),
                             "c": rng.integers(0, 3, n)})

    attack_risk(table(400), table(400), table(200), schema, n_attacks=10)


#: The groups compiled, each in a process of its own when there are several: ONA*'s local
#: search takes about as long to compile as everything else (about a minute each).
GROUPS: dict[str, Callable[[], None]] = {"local search": _local_search, "the rest": _the_rest}


def _compile(group: str) -> tuple[str, float]:
    started = time.perf_counter()
    GROUPS[group]()
    return group, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamanon.warmup",
        description="Compile every numba kernel into numba's on-disk cache (about a minute on "
                    "a fresh clone, a few seconds once cached), so that processes started "
                    "later load them instead of each compiling them.")
    parser.add_argument("--processes", type=int, default=len(GROUPS),
                        help=f"processes compiling at once (default {len(GROUPS)}: one a group)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.processes <= 1:
        done = [_compile(group) for group in GROUPS]
    else:
        with ProcessPoolExecutor(min(args.processes, len(GROUPS))) as pool:
            done = list(pool.map(_compile, GROUPS))
    parts = ", ".join(f"{group} {seconds:.0f} s" for group, seconds in done)
    print(f"kernels compiled or loaded from the cache in {time.perf_counter() - started:.0f} s "
          f"({parts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
