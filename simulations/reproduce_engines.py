"""The engine papers' results reproduced: one table (or more) per paper.

    python -m simulations.reproduce_engines             # all papers, about 30 minutes
    python -m simulations.reproduce_engines --quick     # small sizes, a few minutes
    python -m simulations.reproduce_engines --papers 004,002

Each paper has its own module in ``simulations/repro/`` (``paper000`` PCA-MDAV, ``paper002``
dependence-preserving microaggregation, ``paper003`` LDA-MDAV, ``paper004`` MDAV*, ONA*,
Mondrian, MONA), runnable on its own; this script runs them in turn, prints the Markdown and
writes it to ``simulations/results/reproduce_engines.md``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from simulations.common import RESULTS, shown

PAPERS = ("004", "000", "002", "003")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--papers", default=",".join(PAPERS),
                        help=f"comma-separated paper numbers (default {','.join(PAPERS)})")
    args = parser.parse_args(argv)
    papers = [p.strip() for p in args.papers.split(",") if p.strip()]
    unknown = sorted(set(papers) - set(PAPERS))
    if unknown:
        parser.error(f"unknown paper(s) {', '.join(unknown)}; choose from {', '.join(PAPERS)}")
    sections = []
    for paper in papers:
        started = time.perf_counter()
        module = importlib.import_module(f"simulations.repro.paper{paper}")
        text = module.report(quick=args.quick)
        seconds = time.perf_counter() - started
        sections.append(f"{text}\n\n(paper {paper}: {seconds:.0f} s)")
        print(sections[-1] + "\n", flush=True)
    out = RESULTS / "reproduce_engines.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join(sections) + "\n")
    print(f"written to {shown(out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
