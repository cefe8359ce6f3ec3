"""Reading and writing tables and reports (CSV, Parquet, SPSS or Stata), always atomically.

A write goes to a temporary file in the target directory and is renamed over the target only
when complete, so a failed run never leaves a partial file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from streamanon.errors import InputError

if TYPE_CHECKING:
    from streamanon.schema import Schema

#: CSV, Parquet, SPSS and Stata (:mod:`streamanon.spss_stata`).
TABLE_FORMATS = (".csv", ".parquet", ".sav", ".dta")


def table_format(path: str | os.PathLike[str]) -> str:
    """``.csv``, ``.parquet``, ``.sav`` or ``.dta`` from the file name, or an
    :class:`InputError`."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        shown = suffix or "(none)"
        raise InputError(f"{path}: unsupported file type {shown!r}; use .csv, .parquet, .sav "
                         "(SPSS) or .dta (Stata)")
    return suffix


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (also through links and ``..``)."""
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return os.path.samefile(pa, pb)
    return pa.resolve() == pb.resolve()


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Load a CSV, Parquet, SPSS or Stata file into a DataFrame (labelled values of SPSS
    and Stata as their labels)."""
    fmt = table_format(path)
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    try:
        if fmt == ".csv":  # only an empty cell is missing: "NA" may be Namibia, "None" an answer
            return pd.read_csv(p, keep_default_na=False, na_values=[""])
        if fmt in (".sav", ".dta"):
            from streamanon.spss_stata import read_labelled

            return read_labelled(p, fmt)
        return pd.read_parquet(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"{path}: cannot read {fmt[1:]} file: {_one_line(exc)}") from None
    except Exception as exc:  # pyarrow raises its own error classes for corrupt files
        raise InputError(f"{path}: cannot read {fmt[1:]} file: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None],
                 mode: int | None = None) -> None:
    """Call ``write(tmp_path)`` and move the result onto ``path`` only if it succeeded; the
    file gets ``mode``, or without one what the process umask leaves of 0666."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_table(frame: pd.DataFrame, path: str | os.PathLike[str],
                mode: int | None = None, schema: Schema | None = None) -> None:
    """Write ``frame`` as CSV (floats round-trip exactly), Parquet, SPSS or Stata, atomically
    (``mode``: as :func:`atomic_write`). With ``schema``, its ``category`` and ``ordinal``
    fields are dictionary-encoded in Parquet and labelled codes in SPSS and Stata, and SPSS and
    Stata variables are labelled with the fields' descriptions
    (:mod:`streamanon.spss_stata`)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from streamanon.spss_stata import categorical_columns, write_labelled

    fmt = table_format(path)
    if fmt == ".csv":  # Arrow's writer: ten times pandas' speed, floats still round-trip
        table = pa.Table.from_pandas(frame, preserve_index=False)
        atomic_write(path, lambda tmp: pa_csv.write_csv(table, tmp), mode)
    elif fmt == ".parquet":
        typed = categorical_columns(frame, schema)
        atomic_write(path, lambda tmp: typed.to_parquet(tmp, index=False), mode)
    else:
        atomic_write(path, lambda tmp: write_labelled(frame, tmp, schema, fmt), mode)


def write_json(data: Any, path: str | os.PathLike[str], mode: int | None = None) -> None:
    """Write ``data`` as indented JSON, atomically (``mode``: as :func:`atomic_write`)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False)
            fh.write("\n")

    atomic_write(path, write, mode)


def report_path(output: str | os.PathLike[str]) -> Path:
    """``release.csv`` -> ``release.report.json``, next to the release."""
    p = Path(output)
    return p.with_name(p.stem + ".report.json")
