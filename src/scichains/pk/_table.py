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


def _comment(value) -> bool:
    return isinstance(value, str) and value.lstrip().startswith(COMMENT)


def columns_from_csv(path):
    """``(header, columns, rows)``: ``rows`` the 1-based data row of each record kept (blank
    lines are not counted, comment rows are, and are skipped)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
            while not any(x.strip() for x in header):
                header = next(reader)
        except StopIteration:
            raise EventTableError(f"{path}: the file is empty") from None
        records = [r for r in reader if any(x.strip() for x in r)]
    if header and _comment(header[0]):
        header = [header[0].lstrip()[1:], *header[1:]]
    kept, rows = [], []
    for i, r in enumerate(records, start=1):
        if _comment(r[0]):
            continue
        if len(r) != len(header):
            raise EventTableError(
                f"row {i}: {len(r)} fields but the header has {len(header)} columns"
            )
        kept.append(r)
        rows.append(i)
    return header, [[r[j] for r in kept] for j in range(len(header))], rows


def columns_from_frame(df):
    header = [str(c) for c in df.columns]
    cols = [list(df[c].to_numpy()) for c in df.columns]
    keep = [i for i in range(len(cols[0]) if cols else 0) if not _comment(cols[0][i])]
    return header, [[c[i] for i in keep] for c in cols], [i + 1 for i in keep]


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
