"""Reading an event table's records as text: columns, missing values, comment rows, text
columns (the records' meaning is :mod:`._events`')."""

from __future__ import annotations

import csv
import math

import numpy as np

COMMENT = ("#", "@")


class EventTableError(ValueError):
    """A record of an event table that cannot be used; the message names subject and row."""


def number(text, column, row):
    if text is None:
        return math.nan
    if isinstance(text, (int, float, np.integer, np.floating)):
        return float(text)
    s = str(text).strip()
    if s in ("", ".", "NA", "NaN", "nan", "NAN"):
        return math.nan
    try:
        return float(s)
    except ValueError:
        raise EventTableError(f"row {row}: column {column} holds {s!r}, not a number") from None


def _separated(sep):
    """A function splitting one line into its fields: ``","`` (CSV: quotes, empty fields
    missing) or ``"whitespace"`` (runs of blanks and tabs)."""
    if sep == ",":
        return lambda line: next(csv.reader([line]))
    return lambda line: line.split()


def _ignored(ignore):
    """Whether a line (its text) is a comment row: its first non-blank character is ``#`` or
    ``@``; with ``ignore="@"`` (NONMEM's ``IGNORE=@``) also a letter; with another single
    character ``c`` (NONMEM's ``IGNORE=c``) also ``c``."""
    if ignore is not None and (not isinstance(ignore, str) or len(ignore) != 1 or ignore.isspace()):
        raise ValueError(f"ignore must be one character (NONMEM's IGNORE=c), got {ignore!r}")

    def test(line: str) -> bool:
        c = line.lstrip()[:1]
        return c in COMMENT or c == ignore or (ignore == "@" and c.isalpha())

    return test


def columns_from_file(path, sep=None, names=None, ignore=None, exclude=None):
    """``(header, columns, rows)`` of a text file: ``rows`` the 1-based data row of each
    record kept (blank lines are not counted, comment rows are, and are skipped; the header
    row, when the file has one, is not a data row).

    ``sep``: ``","``, ``"whitespace"`` or None (comma-separated when the first line, the
    header or the first record, holds a comma, else whitespace-separated); ``names``: the
    column names of a file without a header row (NONMEM's ``$INPUT``); ``ignore``: see
    :func:`_ignored`; ``exclude``: see :func:`excluded`."""
    if sep not in (None, ",", "whitespace"):
        raise ValueError(f"sep must be ',', 'whitespace' or None, got {sep!r}")
    comment = _ignored(ignore)
    with open(path, newline="") as fh:
        lines = [line.rstrip("\r\n") for line in fh]
    lines = [line for line in lines if line.strip()]
    if names is None:
        if not lines:
            raise EventTableError(f"{path}: the file is empty")
        first, lines = lines[0], lines[1:]
    else:
        names = [str(n) for n in names]
        first = next((line for line in lines if not comment(line)), "")
    if sep is None:
        sep = "," if "," in first else "whitespace"
    split = _separated(sep)
    if names is None:
        header = split(first)
        if header and header[0].lstrip()[:1] in COMMENT:
            header = [header[0].lstrip()[1:], *header[1:]]
    else:
        header = names
    kept, rows = [], []
    for i, line in enumerate(lines, start=1):
        if comment(line):
            continue
        r = split(line)
        if len(r) != len(header):
            where = "the header has" if names is None else "names gives"
            raise EventTableError(f"row {i}: {len(r)} fields but {where} {len(header)} columns")
        kept.append(r)
        rows.append(i)
    return excluded(header, [[r[j] for r in kept] for j in range(len(header))], rows, exclude)


def columns_from_frame(df, ignore=None, exclude=None):
    """``(header, columns, rows)`` of a DataFrame: rows whose first column is a comment
    (text, see :func:`_ignored`) skipped, and those ``exclude`` names (:func:`excluded`)."""
    comment = _ignored(ignore)
    header = [str(c) for c in df.columns]
    cols = [list(df[c].to_numpy()) for c in df.columns]
    keep = [
        i
        for i in range(len(cols[0]) if cols else 0)
        if not (isinstance(cols[0][i], str) and comment(cols[0][i]))
    ]
    return excluded(header, [[c[i] for i in keep] for c in cols], [i + 1 for i in keep], exclude)


def text_column(name, values, rows, categories):
    """The codes of a text column with ``categories[name]`` (a dict text -> number),
    missing values NaN; refused by name without one."""
    texts = sorted({str(v).strip() for v in values if _number_or_none(v) is None})
    if name not in categories:
        shown = ", ".join(repr(t) for t in texts[:5]) + (", ..." if len(texts) > 5 else "")
        raise EventTableError(
            f"column {name} holds text ({shown}): give its codes, read_events(..., "
            f"categories={{'{name}': {{{texts[0]!r}: 0, ...}}}}), or leave it out "
            f"(drop=['{name}'])"
        )
    codes = categories[name]
    out = np.empty(len(values))
    for k, (v, row) in enumerate(zip(values, rows)):
        t = str(v).strip() if v is not None else ""
        if (
            v is None
            or t in ("", ".", "NA", "NaN", "nan", "NAN")
            or (isinstance(v, float) and math.isnan(v))
        ):
            out[k] = math.nan
        elif t in codes:
            out[k] = float(codes[t])
        else:
            raise EventTableError(
                f"row {row}: column {name} holds {t!r}, which categories['{name}'] does not "
                f"code (it codes {sorted(codes)})"
            )
    return out


def _number_or_none(v):
    try:
        return number(v, "", 0)
    except EventTableError:
        return None


def excluded(header, cols, rows, exclude):
    """``(header, columns, rows)`` without the records that ``exclude`` names (see
    :func:`~scichains.pk.read_events`; None: all kept)."""
    if exclude is None:
        return header, cols, rows
    if not isinstance(exclude, dict):
        raise TypeError("exclude must be a dict {column: value or list of values}")
    upper = [h.strip().upper() for h in header]
    drop = np.zeros(len(rows), dtype=bool)
    for name, values in exclude.items():
        key = str(name).strip().upper()
        if key not in upper:
            raise EventTableError(f"exclude names {name}, which is not a column ({header})")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            values = [values]
        numbers, texts = set(), set()
        for v in values:
            try:
                numbers.add(float(v))
            except (TypeError, ValueError):
                texts.add(str(v).strip())
        for i, v in enumerate(cols[upper.index(key)]):
            try:
                hit = float(v) in numbers
            except (TypeError, ValueError):
                hit = False
            drop[i] |= hit or (v is not None and str(v).strip() in texts)
    keep = np.flatnonzero(~drop)
    return header, [[c[i] for i in keep] for c in cols], [rows[i] for i in keep]
