"""Reading and writing tables and reports (CSV or Parquet), always atomically.

A write goes to a temporary file in the target directory and is renamed over the target only
when complete, so a failed run never leaves a partial file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from streamanon.errors import InputError

TABLE_FORMATS = (".csv", ".parquet")


def table_format(path: str | os.PathLike[str]) -> str:
    """``.csv`` or ``.parquet`` from the file name, or an :class:`InputError`."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        shown = suffix or "(none)"
        raise InputError(f"{path}: unsupported file type {shown!r}; use .csv or .parquet")
    return suffix


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (also through links and ``..``)."""
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return os.path.samefile(pa, pb)
    return pa.resolve() == pb.resolve()


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Load a CSV or Parquet file into a DataFrame."""
    fmt = table_format(path)
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    try:
        if fmt == ".csv":  # only an empty cell is missing: "NA" may be Namibia, "None" an answer
            return pd.read_csv(p, keep_default_na=False, na_values=[""])
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
                mode: int | None = None) -> None:
    """Write ``frame`` as CSV (floats round-trip exactly) or Parquet, atomically (``mode``: as
    :func:`atomic_write`)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    fmt = table_format(path)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if fmt == ".csv":  # Arrow's writer: ten times pandas' speed, floats still round-trip
        atomic_write(path, lambda tmp: pa_csv.write_csv(table, tmp), mode)
    else:
        atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False), mode)


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
