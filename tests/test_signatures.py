"""Each numba kernel compiles one signature, and ``python -m streamanon.warmup`` compiles the one
a run uses (``streamanon.warmup``, "One signature per kernel").

numba compiles a kernel again, with everything it calls, for each new tuple of argument types;
a bare constant passed from kernel to kernel, or a read-only matrix handed to an engine, is
one. Only a cold cache shows it (a kernel loaded from the cache does not load its callees), so
the check runs in a child process with a cache of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

#: The modules holding kernels; each kernel is counted in the module that defines it.
KERNEL_MODULES = ("streamanon.engines._mdav_kernels", "streamanon.engines._local_search_kernels",
                  "streamanon.engines._mondrian_kernels", "streamanon.engines._tclose_kernels",
                  "streamanon.engines.cells", "streamanon.incremental._nn_kernels",
                  "streamanon.incremental.nn", "streamanon._refine_kernels")

CHILD = """
import importlib, json, sys
import numpy as np
import pandas as pd
from numba.core import event
from numba.core.registry import CPUDispatcher

from streamanon import warmup

warmup.main(["--processes", "1"])
kernels = {}
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    for attribute, value in vars(module).items():
        if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
            kernels[f"{name}.{attribute}"] = [str(s) for s in value.signatures]

compiled = []


class Listener(event.Listener):
    def on_start(self, e):
        function = e.data["dispatcher"].py_func
        if function.__module__.startswith("streamanon"):
            compiled.append(f"{function.__module__}.{function.__qualname__}{e.data['args']}")

    def on_end(self, e):
        pass


event.register("numba:compile", Listener())
from streamanon.api import microaggregate
from streamanon.engines import run_engine
from streamanon.refine import refine

rng = np.random.default_rng(0)
n = 2000
survey = pd.DataFrame({
    "grade": rng.choice(["enlisted", "warrant officer", "officer"], n),
    "branch": rng.choice(["army", "navy", "air force", "marine corps"], n),
    "gender": rng.choice(["female", "male"], n),
    "race": rng.choice(["white", "black", "asian", "ami/aln", "other"], n),
    "hisp": rng.choice([True, False], n),
    "rank": rng.integers(1, 12, n)})
schema = {"grade": {"role": "quasi_identifier", "type": "ordinal",
                    "levels": ["enlisted", "warrant officer", "officer"]},
          "branch": {"role": "quasi_identifier", "type": "category"},
          "gender": {"role": "quasi_identifier", "type": "category"},
          "race": {"role": "quasi_identifier", "type": "category"},
          "hisp": {"role": "quasi_identifier", "type": "bool"},
          "rank": {"role": "quasi_identifier", "type": "ordinal", "levels": list(range(1, 12))}}
microaggregate(survey, 5, schema=schema)  # the military survey's run, smaller
X = rng.standard_normal((3000, 15))
for engine in ("mdav", "ona_star"):
    microaggregate(X, 5, engine)
X.flags.writeable = False  # a memory map's, an Arrow buffer's
for engine in ("mdav", "ona_star"):
    labels = run_engine(engine, X, 5)
refine(X, labels, 5, budget_seconds=1.0)
print(json.dumps({"kernels": kernels, "compiled by the runs": compiled}))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, subprocesses) -> dict[str, object]:
    """The kernels' signatures after the warm-up on an empty cache, and what the runs after
    it compiled (a minute or two: every kernel compiles)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path_factory.mktemp("numba"))}
    done = subprocess.run([sys.executable, "-c", CHILD, *KERNEL_MODULES], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.heavy
def test_every_kernel_compiles_one_signature(compiled):
    several = {name: signatures for name, signatures in compiled["kernels"].items()
               if len(signatures) > 1}
    assert not several, "kernels compiled with several signatures:\n" + "\n".join(
        f"{name}:\n    " + "\n    ".join(signatures) for name, signatures in several.items())


@pytest.mark.heavy
def test_the_warm_up_compiles_what_a_run_uses(compiled):
    """After the warm-up a run compiles nothing: the categorical survey's MDAV, MDAV and ONA*
    on continuous data, and the engines and the refinement given a read-only matrix."""
    assert not compiled["compiled by the runs"], "compiled after the warm-up:\n" + "\n".join(
        compiled["compiled by the runs"])


@pytest.mark.heavy
def test_the_warm_up_reaches_the_kernels(compiled):
    """The first check looks at the kernels the warm-up compiled, callees included."""
    kernels = compiled["kernels"]
    assert len(kernels) > 100
    for name in ("streamanon.engines._mdav_kernels.mdav_labels",
                 "streamanon.engines._local_search_kernels.ona_star_labels",
                 "streamanon.engines._mdav_kernels._cell_of",
                 "streamanon.engines.cells.offer", "streamanon._refine_kernels._split",
                 "streamanon.incremental._nn_kernels.cell_members"):
        assert kernels[name], name
