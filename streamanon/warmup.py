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
functions instead of 132, a first ONA* run 199 instead of 251 (the others left are numba's
own, ``np.empty`` and the like, compiled once for each type they are used with).

One cache for several accounts
------------------------------
numba reads a cache only from a directory it may write: before it uses one (in this order
``NUMBA_CACHE_DIR``, the package's ``__pycache__``, ``~/.cache/numba``) it creates a file
there, and skips it when that fails (``numba.core.caching._CacheLocator.ensure_cache_path``).
So kernels compiled at install time into a package that root installed are not found by
another account: it cannot write root's ``__pycache__`` and compiles them all again into its
own ``~/.cache/numba`` (or, with no writable home, cannot import the engines at all: "no
locator available"). A directory the accounts may only read cannot be shared either. What works is a
``NUMBA_CACHE_DIR`` their group may write (numba's documentation calls sharing a cache safe; it
checks the CPU and the sources' content, not who wrote it)::

    install -d -m 2775 -g streamanon /var/cache/streamanon/numba   # setgid: files stay in group
    NUMBA_CACHE_DIR=/var/cache/streamanon/numba python -m streamanon.warmup --shared

with ``NUMBA_CACHE_DIR`` set for every account of the group. ``--shared`` compiles with umask
002 (what numba creates stays writable by the group) and then checks the whole directory;
the directories holding the files must not be sticky (``chmod +t``, as ``/tmp``), where an
account that compiles a kernel anew may not replace the index another wrote and the call
fails with a PermissionError.
"""

from __future__ import annotations

import argparse
import os
import stat
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


def sharing_problems(root: str) -> list[str]:
    """What keeps the other accounts of the group from loading the kernels cached under
    ``root`` (see the module docstring); empty when nothing does."""
    found: dict[str, list[str]] = {}
    top = os.stat(root)
    if not top.st_mode & stat.S_ISGID:  # else what numba creates is in the creator's group
        found.setdefault("directories not setgid (chmod g+s)", []).append(root)
    for directory, _subdirectories, files in os.walk(root):
        here = os.stat(directory)
        mode = here.st_mode
        if here.st_gid != top.st_gid:
            found.setdefault("directories of another group than the cache's", []).append(
                directory)
        if not (mode & stat.S_IWGRP and mode & stat.S_IXGRP):
            found.setdefault("directories the group may not write", []).append(directory)
        if mode & stat.S_ISVTX and files:  # where an index is replaced
            found.setdefault("sticky directories", []).append(directory)
        for name in files:
            path = os.path.join(directory, name)
            info = os.stat(path)
            if not info.st_mode & stat.S_IRGRP:
                found.setdefault("files the group may not read", []).append(path)
            if info.st_gid != top.st_gid:
                found.setdefault("files of another group than the cache's", []).append(path)
    return [f"{len(paths)} {what}, such as {paths[0]}" for what, paths in found.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamanon.warmup",
        description="Compile every numba kernel into numba's on-disk cache (about a minute on "
                    "a fresh clone, a few seconds once cached), so that processes started "
                    "later load them instead of each compiling them.")
    parser.add_argument("--processes", type=int, default=len(GROUPS),
                        help=f"processes compiling at once (default {len(GROUPS)}: one a group)")
    parser.add_argument("--shared", action="store_true",
                        help="for the accounts of a group sharing NUMBA_CACHE_DIR (a directory "
                             "the group may write, setgid): compile with umask 002, then check "
                             "that they can load what is cached there")
    args = parser.parse_args(argv)
    shared = os.environ.get("NUMBA_CACHE_DIR", "")
    if args.shared and not shared:
        parser.error("--shared caches into NUMBA_CACHE_DIR, which is not set: set it to the "
                     "directory the accounts share (install -d -m 2775 -g GROUP DIR)")
    started = time.perf_counter()
    umask = os.umask(0o002) if args.shared else None
    try:
        if args.processes <= 1:
            done = [_compile(group) for group in GROUPS]
        else:
            with ProcessPoolExecutor(min(args.processes, len(GROUPS))) as pool:
                done = list(pool.map(_compile, GROUPS))
    finally:
        if umask is not None:
            os.umask(umask)
    parts = ", ".join(f"{group} {seconds:.0f} s" for group, seconds in done)
    print(f"kernels compiled or loaded from the cache in {time.perf_counter() - started:.0f} s "
          f"({parts})")
    if not args.shared:
        return 0
    problems = sharing_problems(shared)
    for problem in problems:
        print(f"not shared: {problem}", file=sys.stderr)
    if problems:
        print(f"the other accounts will compile the kernels again: make {shared} writable by "
              "their group and not sticky (install -d -m 2775 -g GROUP), then run this again",
              file=sys.stderr)
        return 1
    print(f"the accounts of group {_group(os.stat(shared).st_gid)} with NUMBA_CACHE_DIR={shared} "
          "load them")
    return 0


def _group(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


if __name__ == "__main__":
    sys.exit(main())
