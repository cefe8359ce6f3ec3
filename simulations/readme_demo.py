"""The sample of ``make demo`` in the documentation (docs/getting-started.md): made from a
real run, never edited by hand.

    python -m simulations.readme_demo                 # runs the demo, then rewrites the block
    python -m simulations.readme_demo --from DIR      # the block from a demo already run in DIR

The block between ``<!-- demo-sample:start -->`` and ``<!-- demo-sample:end -->`` in
docs/getting-started.md is the demo's closing table
(:func:`streamanon.simulation.demo.side_by_side`) of the run's ``simulation.json``, under a line
that says when, on which commit and machine, and with which command it ran. The summary it was
made from is kept in ``docs/demo-sample.json``, so a test remakes the block from it and checks
that the page shows exactly that.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from simulations.bench_default_plan import commit, machine
from simulations.common import ROOT
from streamanon.simulation.demo import side_by_side

#: The page that shows the sample.
PAGE = ROOT / "docs" / "getting-started.md"
SAMPLE = ROOT / "docs" / "demo-sample.json"
START, END = "<!-- demo-sample:start -->", "<!-- demo-sample:end -->"


def block(sample: dict[str, Any]) -> str:
    """The page's block for a stored sample (its provenance and the demo's summary)."""
    p = sample["provenance"]
    return "\n".join([
        START,
        f"A run of `{p['command']}` on {p['date']}, commit {p['commit']}, {p['machine']}:",
        "",
        "```",
        side_by_side(sample["summary"]).strip("\n"),
        "```",
        END])


def rewrite(page: str, sample: dict[str, Any]) -> str:
    """``page`` with its sample block replaced by the one of ``sample``."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + block(sample) + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", default=None, metavar="DIR",
                        help="a demo output directory to take the run from (default: run "
                             "`make demo` now, into demo-output)")
    args = parser.parse_args()
    command = "make demo"
    source = Path(args.source) if args.source else ROOT / "demo-output"
    if args.source is None:
        subprocess.run(["make", "-C", str(ROOT), "demo"], check=True)
    summary = json.loads((source / "simulation.json").read_text())
    released = summary["release"]["released_at"]
    sample = {"provenance": {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(released)),
        "commit": commit(), "machine": machine()}, "summary": summary}
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    SAMPLE.write_text(json.dumps(sample, indent=2) + "\n")
    PAGE.write_text(rewrite(PAGE.read_text(), sample))
    print(block(sample))
    print(f"\nwrote {SAMPLE.relative_to(ROOT)} and the block in {PAGE.relative_to(ROOT)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
