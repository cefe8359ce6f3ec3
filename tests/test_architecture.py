"""The floors of docs/architecture.md, checked from the imports.

The import graph is read with ``ast`` from the files themselves, imports inside functions and
under ``TYPE_CHECKING`` included, so a rule cannot be dodged by moving an import into a
function. A module importing ``a.b.c`` depends on ``a.b.c`` (or on ``a.b`` when ``c`` is a name
in it); the parent packages Python runs first are not counted, as in import-linter. Each rule
is a function of the source tree, and each is run once on a tree with a planted violation, so
that a check that cannot fail does not pass for one that holds.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("streamanon", "scheduler")

#: The floors, bottom up. The core is ``streamanon`` minus the three shells below it.
SHELLS = ("streamanon.service", "streamanon.simulation", "streamanon.cli", "streamanon.cluster",
          "streamanon.__main__")
SCHEDULER = ("scheduler",)
ENGINES = ("streamanon.engines", "streamanon.incremental")
#: What an engine or an incremental stage may not import: ours that read or write files or
#: talk to the network, and the libraries that do.
IO_MODULES = ("streamanon.io", *SHELLS, *SCHEDULER, "kafka",
              "aiokafka", "confluent_kafka", "distributed", "dask", "psycopg", "sqlite3",
              "aiohttp", "socket", "http", "urllib", "requests", "pyarrow", "pandas",
              "subprocess", "shutil", "pathlib", "tempfile", "io", "pickle", "json")
#: The numba kernels may be long: a kernel is one loop nest that numba compiles whole.
KERNEL = "_kernels.py"
MAX_LINES = 700


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Our modules under ``root``: name -> file."""
    return {module_name(p, root): p for package in PACKAGES if (root / package).is_dir()
            for p in sorted((root / package).rglob("*.py"))}


def imported(path: Path, name: str) -> set[str]:
    """Every module ``path`` (module ``name``) imports, anywhere in it, as absolute names:
    ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a name resolved to the longest module)."""
    ours = modules(root)

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in ours:
                return ".".join(parts[:i])
        return None

    return {m: {r for n in imported(p, m) if (r := resolve(n)) and r != m}
            for m, p in ours.items()}


def under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def in_core(name: str) -> bool:
    return name.startswith("streamanon") and not under(name, SHELLS)


def crossings(root: Path, source, forbidden) -> dict[str, list[str]]:
    """Modules chosen by ``source`` that import a name chosen by ``forbidden`` (any import,
    ours or a library's)."""
    out = {}
    for m, p in modules(root).items():
        if source(m):
            bad = sorted(n for n in imported(p, m) if forbidden(n))
            if bad:
                out[m] = bad
    return out


def core_crossings(root: Path = ROOT) -> dict[str, list[str]]:
    """The core imports nothing of the service, the CLI, the cluster or the scheduler."""
    return crossings(root, in_core, lambda n: under(n, SHELLS + SCHEDULER))


def scheduler_crossings(root: Path = ROOT) -> dict[str, list[str]]:
    """The scheduler imports nothing of streamanon."""
    return crossings(root, lambda m: under(m, SCHEDULER), lambda n: under(n, ("streamanon",)))


def cli_importers(root: Path = ROOT) -> dict[str, list[str]]:
    """Nothing imports the CLI but ``streamanon/__main__.py``."""
    cli = ("streamanon.cli",)
    return crossings(root, lambda m: not under(m, (*cli, "streamanon.__main__")),
                     lambda n: under(n, cli))


def service_importers_of_simulation(root: Path = ROOT) -> dict[str, list[str]]:
    """The service imports nothing of the simulation wing: the wing drives the service from
    outside, as a user would."""
    wing = ("streamanon.simulation",)
    return crossings(root, lambda m: under(m, ("streamanon.service",)),
                     lambda n: under(n, wing))


def engine_io(root: Path = ROOT) -> dict[str, list[str]]:
    """Engines and incremental stages import no module that does I/O."""
    return crossings(root, lambda m: under(m, ENGINES), lambda n: under(n, IO_MODULES))


def cycles(root: Path = ROOT) -> list[list[str]]:
    """The import cycles among our modules: strongly connected components of more than one
    module (Tarjan), each sorted."""
    edges = graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def long_modules(root: Path = ROOT) -> dict[str, int]:
    """Modules over :data:`MAX_LINES` lines, kernels aside."""
    return {m: n for m, p in modules(root).items()
            if not p.name.endswith(KERNEL) and (n := len(p.read_text().splitlines())) > MAX_LINES}


RULES = [core_crossings, scheduler_crossings, cli_importers, service_importers_of_simulation,
         engine_io, cycles, long_modules]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_the_tree_keeps_the_rule(rule):
    assert len(modules()) > 60  # the tree is there
    assert not rule(), rule.__doc__


#: One planted violation per rule: files written into a copy of the tree's layout.
PLANTED = {
    "core_crossings": {"streamanon/metrics.py":
                       "def f():\n    from streamanon.service.store import open_store\n"},
    "scheduler_crossings": {"scheduler/planner.py":
                            "if False:\n    import streamanon.engines.mdav\n"},
    "cli_importers": {"streamanon/service/store.py": "def f():\n    import streamanon.cli\n"},
    "service_importers_of_simulation": {
        "streamanon/service/store.py": "def f():\n    from streamanon.simulation import demo\n"},
    "engine_io": {"streamanon/engines/mdav.py": "def f():\n    import confluent_kafka\n"},
    "cycles": {"streamanon/a.py": "def f():\n    from streamanon import b\n",
               "streamanon/b.py": "from streamanon.a import f\n"},
    "long_modules": {"streamanon/service/big.py": "x = 1\n" * (MAX_LINES + 1)},
}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_the_rule_fails_on_a_planted_violation(rule, tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for sub in ("engines", "service"):
        (tmp_path / "streamanon" / sub).mkdir()
        (tmp_path / "streamanon" / sub / "__init__.py").write_text("")
    (tmp_path / "streamanon" / "service" / "store.py").write_text("def open_store(): ...\n")
    (tmp_path / "streamanon" / "engines" / "mdav.py").write_text("import numpy\n")
    (tmp_path / "streamanon" / "metrics.py").write_text("import numpy\n")
    (tmp_path / "scheduler" / "planner.py").write_text("import math\n")
    assert not rule(tmp_path)  # the clean copy keeps it
    for path, text in PLANTED[rule.__name__].items():
        (tmp_path / path).write_text(text)
    assert rule(tmp_path)


def test_a_kernel_may_be_long_and_a_relative_import_resolves(tmp_path):
    (tmp_path / "streamanon" / "engines").mkdir(parents=True)
    (tmp_path / "streamanon" / "__init__.py").write_text("")
    (tmp_path / "streamanon" / "engines" / "__init__.py").write_text("from . import _x_kernels\n")
    (tmp_path / "streamanon" / "engines" / "_x_kernels.py").write_text(
        "from .. import engines\n" + "x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == {}
    assert cycles(tmp_path) == [["streamanon.engines", "streamanon.engines._x_kernels"]]


def unnamed_modules(page: Path = ROOT / "docs" / "architecture.md",
                    root: Path = ROOT) -> list[str]:
    """The module files the architecture page does not name (in backticks)."""
    text = page.read_text()
    return sorted({p.name for p in modules(root).values()
                   if p.name not in ("__init__.py", "__main__.py")
                   and f"`{p.name}`" not in text})


def test_the_architecture_page_names_every_module(tmp_path):
    assert unnamed_modules() == []
    page = tmp_path / "page.md"
    page.write_text("`mdav.py`\n")
    assert "ona.py" in unnamed_modules(page)


# -- what a fresh interpreter loads -----------------------------------------------------------


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\n"
                          "print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", [
    "import streamanon",
    "import streamanon.service.collector",
    "import streamanon.service.store",
    "import streamanon.cli",
])
def test_importing_the_package_or_the_ingest_path_loads_no_numerical_core(subprocesses, statement):
    loaded = loaded_after(statement)
    assert "numba" not in loaded
    assert not {m for m in loaded if m.startswith("streamanon.engines")}


def test_the_command_line_loads_no_scheduler_before_a_command_needs_it(subprocesses):
    """Building the parser is what every command pays first: scipy (the scheduler's
    optimisers: 1.2 s of imports), pandas and numba load only when a command runs that needs
    them."""
    loaded = loaded_after("import streamanon.cli\nstreamanon.cli.build_parser()")
    heavy = ("scipy", "pandas", "numba", "scheduler.live")
    assert not {m for m in loaded if m in heavy or m.startswith(tuple(f"{h}." for h in heavy))}


def test_recording_a_runs_time_loads_no_scipy(subprocesses):
    """``anonymize`` adds its run to the cost model (``scheduler.cost_model``) after every
    release: scipy's statistics (0.7 s to import) load only for a plan's upper bound."""
    assert not {m for m in loaded_after("import scheduler.cost_model")
                if m == "scipy" or m.startswith("scipy.")}


def test_the_lazy_exports_still_work(subprocesses):
    loaded = loaded_after("from streamanon import microaggregate, Microaggregation")
    assert "streamanon.api" in loaded


# -- private modules stay in their package; the package needs nothing of tests/ ---------------


def private_package(module: str) -> str | None:
    """The package a private module belongs to: ``a.b`` for ``a.b._x`` and for ``a.b._x.y``
    (a name that begins with one underscore); None for a public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def private_crossings(root: Path = ROOT) -> dict[str, list[str]]:
    """No module imports a private module of another package: ``a.b._x`` is imported only by
    the modules of ``a.b`` and of the packages inside it. A private name of a public module
    (``from a.b.c import _f``) is not a module and is not counted. Tests and benchmarks are not
    checked: they may open a kernel to test or time it."""
    ours = modules(root)
    out = {}
    for m, targets in graph(root).items():
        package = m if ours[m].name == "__init__.py" else m.rpartition(".")[0]
        bad = sorted(t for t in targets
                     if (owner := private_package(t)) is not None and not under(package, (owner,)))
        if bad:
            out[m] = bad
    return out


#: What must run without the test suite: the package and the benchmarks.
NOT_TESTS = ("streamanon", "scheduler", "simulations")


def importers_of_tests(root: Path = ROOT) -> dict[str, list[str]]:
    """Nothing outside ``tests/`` imports ``tests``: the package and ``simulations/`` run from a
    checkout without the test suite; what both need lives in the package or in ``simulations/``
    (tests may import those)."""
    out = {}
    for package in NOT_TESTS:
        if not (root / package).is_dir():
            continue
        for p in sorted((root / package).rglob("*.py")):
            m = module_name(p, root)
            bad = sorted(n for n in imported(p, m) if under(n, ("tests",)))
            if bad:
                out[m] = bad
    return out


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_no_private_module_is_imported_from_another_package(tmp_path):
    assert not private_crossings(), private_crossings.__doc__
    _write_tree(tmp_path, {
        "streamanon/__init__.py": "", "scheduler/__init__.py": "",
        "streamanon/engines/__init__.py": "from . import ona\n",
        "streamanon/engines/_cells.py": "import numpy\n",
        "streamanon/engines/_ona_kernels.py": "from streamanon.engines._cells import sq\n",
        "streamanon/engines/ona.py": "from ._ona_kernels import ona\n\ndef _helper(): ...\n",
        "streamanon/engines/inner/__init__.py": "",
        "streamanon/engines/inner/part.py": "def f():\n    from .. import _cells\n",
        "streamanon/refine.py": "from streamanon.engines.ona import _helper\n",
    })
    # the same package, a package inside it, a private function of a public module: all kept
    assert private_crossings(tmp_path) == {}
    _write_tree(tmp_path, {"streamanon/incremental/__init__.py": "",
                           "streamanon/incremental/nn.py":
                           "def f():\n    from streamanon.engines._cells import offer\n"})
    assert private_crossings(tmp_path) == {"streamanon.incremental.nn":
                                           ["streamanon.engines._cells"]}


def test_nothing_outside_tests_imports_tests(tmp_path):
    assert not importers_of_tests(), importers_of_tests.__doc__
    _write_tree(tmp_path, {
        "streamanon/__init__.py": "", "scheduler/__init__.py": "",
        "simulations/__init__.py": "", "simulations/common.py": "import numpy\n",
        "simulations/bench.py": "from .common import numpy\nfrom simulations import common\n",
        "tests/__init__.py": "", "tests/support.py": "from simulations import common\n",
    })
    assert importers_of_tests(tmp_path) == {}
    _write_tree(tmp_path, {"simulations/faults.py":
                           "def main():\n    from tests.support import postgres_server\n"})
    assert importers_of_tests(tmp_path) == {"simulations.faults": ["tests.support",
                                                                "tests.support.postgres_server"]}

# -- one Kafka import site --------------------------------------------------------------------

#: The Kafka client libraries, and the one module of ours that may import them.
KAFKA_LIBRARIES = ("kafka", "aiokafka", "confluent_kafka")
KAFKA_DOOR = "streamanon.service.kafka_clients"


def kafka_importers(root: Path = ROOT) -> dict[str, list[str]]:
    """No module but the door imports a Kafka client library, so that every client is built
    from one settings object (TLS, SASL and the client id mapped once per library)."""
    return crossings(root, lambda m: m != KAFKA_DOOR, lambda n: under(n, KAFKA_LIBRARIES))


def test_only_the_door_imports_a_kafka_client(tmp_path):
    assert len(modules()) > 60
    assert not kafka_importers(), kafka_importers.__doc__
    door = {n.split(".")[0] for n in imported(
        ROOT / "streamanon" / "service" / "kafka_clients.py", KAFKA_DOOR)}
    assert door & set(KAFKA_LIBRARIES) == {"aiokafka", "confluent_kafka"}  # not kafka-python
    service = tmp_path / "streamanon" / "service"
    service.mkdir(parents=True)
    for package in (tmp_path / "streamanon", service, tmp_path / "scheduler"):
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
    (service / "kafka_clients.py").write_text("def f():\n    import aiokafka\n    import kafka\n")
    (service / "collector.py").write_text("from streamanon.service import kafka_clients\n")
    (service / "kafkaesque.py").write_text("import kafkaesque_lib\n")  # a name, not the library
    assert not kafka_importers(tmp_path)  # the clean copy keeps it
    for path, text in {"streamanon/service/collector.py": "def f():\n    import confluent_kafka\n",
                       "scheduler/jobs.py": "if False:\n    from aiokafka.errors import X\n"
                       }.items():
        (tmp_path / path).write_text(text)
    assert kafka_importers(tmp_path) == {"scheduler.jobs": ["aiokafka.errors",
                                                            "aiokafka.errors.X"],
                                         "streamanon.service.collector": ["confluent_kafka"]}


def undrawn_core_modules(page: Path = ROOT / "docs" / "architecture.md",
                         root: Path = ROOT) -> list[str]:
    """The public modules and packages of the core that the floors diagram's core floor does
    not name (a private module sits beside its one user, which the diagram names)."""
    text = page.read_text()
    floor = text[text.index(" core "):text.index("(engines/ and incremental/ import")]
    drawn = {w.strip("/|") for w in floor.split()}
    core = {m.split(".")[1] for m in modules(root)
            if in_core(m) and m.count(".") >= 1 and not m.split(".")[1].startswith("_")}
    data = {p.name for p in (root / "streamanon").iterdir() if p.is_dir()
            and not (p / "__init__.py").exists() and not p.name.startswith(("_", "."))}
    return sorted((core | data) - drawn)


def test_the_floors_diagram_names_every_core_module(tmp_path):
    assert undrawn_core_modules() == []
    page = tmp_path / "page.md"
    page.write_text(" core   streamanon/: schema mixed\n (engines/ and incremental/ import\n")
    assert "dp" in undrawn_core_modules(page)
