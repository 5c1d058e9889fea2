"""NONMEM-style event tables: one record per row, read into per-subject doses and observations.

Columns (names case-insensitive; other numeric columns are covariates, text columns are
encoded by ``categories`` or refused, ``drop`` names columns to leave out):

- ``ID`` (required): subject identifier; a subject's records must be contiguous.
- ``TIME`` (required): time of the record; non-decreasing within a subject.
- ``DV``: the observation (required on observation records).
- ``AMT``: dose amount (dose records: finite and > 0).
- ``EVID``: 0 observation, 1 dose, 2 other (ignored), 3 reset, 4 reset and dose. Default: 1
  where ``AMT > 0``, else 0. A reset at ``t`` sets every compartment (and every sensitivity)
  to zero, as NONMEM's re-initialisation: an infusion of an earlier record still running at
  ``t`` stops there, and the doses of earlier records due at or after ``t`` (``ADDL``
  repeats, a bolus at ``t`` recorded before it) are not given; 4 then gives its own dose
  (the record's ``AMT``, ``RATE``, ``II``, ``ADDL``, ``SS`` as for 1). Not supported, and
  refused: ``TIME`` going back at a reset (NONMEM lets time restart there; here a subject's
  times are one axis), an observation recorded before a reset at the same time (it would
  see the state before it), ``AMT`` on an ``EVID`` 3 record (a reset and dose is 4), a reset
  during a steady-state infusion, and (when the objective is made) resets with lag times.
- ``MDV``: 1 marks a record whose ``DV`` is not an observation (default: 0 on observations;
  ``MDV=0`` on a dose record, a dose that is also an observation, is refused).
- ``CMT``: the compartment a dose goes into, 1-based (state ``CMT - 1``; default 1).
  On observation records ``CMT`` does not select anything: without ``DVID`` it may name the
  observed compartment, one value for the whole table (several are refused: select the
  endpoints with ``DVID``); with ``DVID``, one value per ``DVID`` (a table whose records of
  one ``DVID`` name several compartments is refused). ``AMT > 0`` on an observation record
  is refused.
- ``DVID``: the endpoint of each observation record (a whole number; required on every
  observation record of a table that has the column, ignored on doses): the model's
  ``observe={dvid: expression}`` and ``error={dvid: ErrorModel}`` give each its prediction
  and residual error (see :class:`PKModel`). A model with a single ``observe`` expression
  refuses data with a ``DVID`` column, and a ``DVID`` the model does not have is refused
  naming it and the subject, when the objective is made.
- ``CENS``: 1 marks an observation below the limit of quantification, whose ``DV`` is that
  limit (the LLOQ; nlmixr2's and Monolix's convention), -1 one above its ``DV``; 0 or
  missing: observed. ``LIMIT``: the other end of a censored observation's interval (below
  ``DV`` for ``CENS=1``, above it for -1; missing or infinite, ``-inf`` or ``inf``: none); a
  finite ``LIMIT`` on an observed record (nlmixr2's M2) is refused. The fit's likelihood of
  censored observations: M3 (default) or M4, see :class:`PopulationObjective` (``blq``).
- ``OCC``: the occasion of each record (a whole number from 1), read as a covariate and
  carried forward like one: a model with inter-occasion variability
  (``PKModel(iov_eta=..., occasions=K)``) gives each occasion its own random effects, and
  checks that the values are whole numbers from 1 to ``K``.
- Reserved and not supported (refused by name, never read as covariates): ``BLQ``,
  ``LLOQ``, ``L2``.
- ``RATE``: infusion rate (> 0: zero-order input ``AMT / RATE`` long); ``DUR``: infusion
  duration (> 0, when ``RATE`` is 0 or absent). 0 or absent: a bolus. ``RATE=-2``: a
  zero-order input whose duration the model gives (NONMEM's ``D1``: ``PKModel(duration=
  {state: expression})``); ``RATE=-1``: whose rate it gives (``R1``: ``PKModel(rate=...)``);
  neither with ``SS`` or a later reset.
- ``II``, ``ADDL``: ``ADDL`` further doses every ``II`` after this one.
- ``SS``: 1 marks a steady-state dose (with ``II > 0``): the state just before it is reset
  to the periodic steady state of this dose repeated every ``II`` (earlier doses are
  forgotten, as NONMEM's ``SS=1``); a bolus, or an infusion shorter than ``II``. ``SS=2``:
  that steady state is added to the current state instead (superposition, NONMEM's
  ``SS=2``: earlier doses are kept; for models linear in the states, which the objective
  checks). Constant-infusion steady states (``AMT=0``, ``RATE>0``) are not supported.

Covariates may change within a subject: a value holds from its record's time until the next
change (last observation carried forward, as rxode2/nlmixr2 interpolate by default; NONMEM
uses the next record's value for the interval before it), a missing value keeps the previous
one.

Files as NONMEM reads them: comma- or whitespace-separated (``sep``), with a header row or
the names given (``names``, NONMEM's ``$INPUT``). Missing values: empty, ``.`` (NONMEM's),
``NA``/``NaN``; an infinite value (``inf``) is refused as not finite (``LIMIT`` excepted).
Rows whose first non-blank character is ``#`` or ``@`` are comments and skipped (NONMEM's
``IGNORE=#``; a header row may start with one too); ``ignore="@"`` also skips rows starting
with a letter (NONMEM's ``IGNORE=@``), ``ignore="C"`` those starting with ``C``.

At equal times, a subject's doses are given before its observations are read (a dose at
time 0 and a sample at time 0: the sample sees the dose in the depot). Records after the
last observation are fine.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ._records import Dose, EventData, Subject, limit_side
from ._table import EventTableError, columns_from_file, columns_from_frame, number, text_column

KNOWN = (
    "ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "DUR", "II", "ADDL", "SS", "CENS",
    "LIMIT", "DVID",
)  # fmt: skip
UNSUPPORTED = {
    "BLQ": (
        "a BLQ flag is not read: mark censored observations CENS=1 with DV = the LLOQ "
        "(nlmixr2's and Monolix's convention)"
    ),
    "LLOQ": (
        "an LLOQ column is not read: mark censored observations CENS=1 with DV = the LLOQ "
        "(nlmixr2's and Monolix's convention)"
    ),
    "L2": "NONMEM's L2 data item (records of one level) is not supported",
}


def read_events(
    source,
    n_states: int | None = None,
    categories: dict | None = None,
    drop=(),
    sep: str | None = None,
    names=None,
    ignore: str | None = None,
    exclude: dict | None = None,
) -> EventData:
    """Read a NONMEM-style event table (see the module docstring for the columns).

    Parameters
    ----------
    source : path of a text file (a NONMEM data file as written: comma- or
        whitespace-separated, a header row unless ``names`` is given) or a pandas
        ``DataFrame`` (anything with ``columns`` and ``df[c].to_numpy()``; pandas itself is
        optional)
    n_states : when given, doses into ``CMT > n_states`` are refused here (the fit checks
        against its model anyway)
    categories : ``{column: {text: code}}``: a text column's values as numbers (a
        categorical covariate, e.g. ``{"SEX": {"M": 0, "F": 1}}``); a text column without
        one is refused, naming it (never dropped)
    drop : column names to leave out (NONMEM's ``$INPUT ... =DROP``), e.g. a free-text
        comment column
    sep : a file's field separator: ``","`` (empty fields are missing; quotes as CSV),
        ``"whitespace"`` (blanks and tabs) or None (default: comma-separated when the first
        line holds a comma, else whitespace)
    names : the column names of a file without a header row, in order (NONMEM's
        ``$INPUT ID TIME AMT DV ...``); each row must have as many fields
    ignore : rows whose first non-blank character is ``#`` or ``@`` are comments and
        skipped; ``ignore="@"`` (NONMEM's ``IGNORE=@``) skips those starting with a letter
        too (repeated header lines, a table file's title), another single character ``c``
        (NONMEM's ``IGNORE=c``, e.g. ``"C"`` for a column of ``C`` flags) those starting
        with it. Comment rows count in the row numbers of messages, blank lines do not
    exclude : ``{column: value or list of values}``: records whose value in that column is one
        of those are left out before anything else is read (NONMEM's
        ``IGNORE=(DVID.EQ.2)``; several columns: a record matching any is left out), e.g.
        ``{"DVID": 2}`` to fit the concentrations of a PK/PD table alone. Values compare as
        numbers (``2`` matches ``2.0``) or, for text, as written; the row numbers of messages
        stay those of the file

    Returns
    -------
    EventData

    Raises
    ------
    EventTableError (a ``ValueError``) naming the subject ID and the 1-based data row: a
    missing or non-positive dose amount, a time earlier than the subject's previous record, a
    missing ``TIME``/``ID``, a missing ``DV`` on an observation, a value that is not finite
    (``inf``), an unknown ``EVID``, a reset that is not supported (see ``EVID`` above),
    ``MDV=0`` on a dose, ``AMT`` on an
    observation, observations of one ``DVID`` (or, without ``DVID``, of the table) in several
    compartments, an observation without a ``DVID`` in a table with the column, a ``DVID``
    that is not a whole number, a compartment below 1 (or above
    ``n_states``), ``ADDL`` without ``II``, ``SS`` other than 0/1/2, ``SS`` 1 or 2 without ``II``
    or with an infusion as long as ``II``, inconsistent ``RATE``/``DUR``, ``CENS`` other
    than 0/1/-1 or not on an observation, a ``LIMIT`` on the wrong side of ``DV`` or on an
    observed record, a subject whose records are not contiguous; and naming the column: a
    reserved column that is not supported (``BLQ``, ``LLOQ``, ``L2``), a
    text column without ``categories``.
    """
    if isinstance(source, (str, os.PathLike)):
        header, cols, rows = columns_from_file(source, sep, names, ignore, exclude)
    elif hasattr(source, "columns") and hasattr(source, "__getitem__"):
        if sep is not None or names is not None:
            raise TypeError("sep and names are read_events options for files, not DataFrames")
        header, cols, rows = columns_from_frame(source, ignore, exclude)
    else:
        raise TypeError("read_events takes a file path or a pandas DataFrame")
    categories = {str(k).strip().upper(): v for k, v in (categories or {}).items()}
    if isinstance(drop, str):
        drop = [drop]
    drop = [str(d).strip().upper() for d in drop]
    upper = [h.strip().upper() for h in header]
    dup = sorted({h for h in upper if upper.count(h) > 1})
    if dup:
        raise EventTableError(f"columns named twice (names are case-insensitive): {dup}")
    for name in drop:
        if name not in upper:
            raise EventTableError(f"drop names {name}, which is not a column ({header})")
        if name in ("ID", "TIME"):
            raise EventTableError(f"the {name} column cannot be dropped")
    for name in categories:
        if name not in upper or name in drop:
            raise EventTableError(f"categories names {name}, which is not a column read")
    keep = [k for k, h in enumerate(upper) if h not in drop]
    header = [header[k] for k in keep]
    cols = [cols[k] for k in keep]
    upper = [upper[k] for k in keep]
    for name in upper:
        if name in UNSUPPORTED:
            raise EventTableError(
                f"column {name}: {UNSUPPORTED[name]} (read_events(..., drop=['{name}']) leaves "
                "it out)"
            )
    for need in ("ID", "TIME"):
        if need not in upper:
            raise EventTableError(f"the table needs an {need} column; it has {header}")
    nrec = len(cols[0]) if cols else 0
    raw = dict(zip(upper, cols))
    ids = raw["ID"]
    num = {}
    for name, values in raw.items():
        if name == "ID":
            continue
        if name in categories:
            num[name] = text_column(name, values, rows, categories)
            continue
        try:
            num[name] = np.array([number(v, name, row) for v, row in zip(values, rows)])
        except EventTableError:
            if name in KNOWN:
                raise
            num[name] = text_column(name, values, rows, categories)  # refuses
        bad = np.flatnonzero(np.isinf(num[name]))
        if bad.size and name != "LIMIT":
            k = int(bad[0])
            raise EventTableError(
                f"row {rows[k]} (ID {ids[k]}): column {name} holds {num[name][k]:g}, not a "
                "finite number (missing values are empty, '.' or NA)"
            )
    covariates = tuple(c for c in num if c not in KNOWN)

    def col(name, default):
        return num[name] if name in num else np.full(nrec, default)

    time, dv, amt = col("TIME", math.nan), col("DV", math.nan), col("AMT", 0.0)
    cens, limit = col("CENS", 0.0), col("LIMIT", math.nan)
    has_cens = "CENS" in num or "LIMIT" in num
    has_dvid = "DVID" in num
    dvid = col("DVID", math.nan)
    obs_cmt = {}  # (DVID or None, observed compartment) -> first row
    mdv, cmt, rate = col("MDV", math.nan), col("CMT", 1.0), col("RATE", 0.0)
    dur, ii, addl, ss = col("DUR", 0.0), col("II", 0.0), col("ADDL", 0.0), col("SS", 0.0)
    if "EVID" in num:
        evid = num["EVID"]
    else:
        evid = np.where(np.nan_to_num(amt) > 0, 1.0, 0.0)

    def idtext(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            return int(v)
        if isinstance(v, np.integer):
            return int(v)
        s = str(v).strip()
        if s in ("", ".", "NA", "NaN", "nan"):
            return None
        try:
            f = float(s)
            return int(f) if f.is_integer() else f
        except ValueError:
            return s

    subjects: list[Subject] = []
    seen = set()
    cur = None
    for r in range(nrec):
        row = rows[r]
        sid = idtext(ids[r])
        if sid is None:
            raise EventTableError(f"row {row}: the ID is missing")
        where = f"subject ID {sid}, row {row}"
        if cur is None or sid != cur["id"]:
            if sid in seen:
                raise EventTableError(
                    f"{where}: the records of subject ID {sid} are not contiguous (it appeared "
                    "earlier, separated by another subject)"
                )
            seen.add(sid)
            cur = {
                "id": sid,
                "doses": [],
                "t": [],
                "dv": [],
                "rows": [],
                "last": -math.inf,
                "cov": {c: num[c][r] for c in covariates},
                "changes": set(),
                "now": {c: num[c][r] for c in covariates},
                "history": [],
                "cens": [],
                "limit": [],
                "dvid": [],
                "resets": [],
            }
            subjects.append(cur)
        t = time[r]
        if not math.isfinite(t):
            raise EventTableError(f"{where}: TIME is missing or not finite")
        e = evid[r]
        if t < cur["last"] and e in (3.0, 4.0):
            raise EventTableError(
                f"{where}: TIME {t:g} goes back at a reset (EVID {e:g}; the previous record is "
                f"at {cur['last']:g}): NONMEM lets time restart at a reset, here a subject's "
                "times are one axis (give the times after the reset on it)"
            )
        if t < cur["last"]:
            raise EventTableError(
                f"{where}: TIME {t:g} is earlier than the subject's previous record "
                f"({cur['last']:g}); sort each subject's records by time"
            )
        cur["last"] = t
        changed = False
        for c in covariates:
            a, b = cur["now"][c], num[c][r]
            if math.isnan(b) or a == b:
                continue  # missing: the value in effect carries forward
            cur["now"][c] = b
            cur["changes"].add(c)
            changed = True
        if changed:
            cur["history"].append((float(t), row, dict(cur["now"])))
        if e not in (0.0, 1.0, 2.0, 3.0, 4.0):
            raise EventTableError(
                f"{where}: EVID {e:g} is not supported (0 observation, 1 dose, 2 other, 3 "
                "reset, 4 reset and dose; rxode2 codes such as 101 are not)"
            )
        ce = 0.0 if math.isnan(cens[r]) else cens[r]
        if ce not in (0.0, 1.0, -1.0):
            raise EventTableError(
                f"{where}: CENS {ce:g} is not 0 (observed), 1 (below DV, the LLOQ) or -1 (above DV)"
            )
        observation = e == 0.0 and mdv[r] != 1.0
        if ce != 0.0 and not observation:
            raise EventTableError(
                f"{where}: CENS {ce:g} on a record that is not an observation (EVID {e:g}"
                f"{', MDV 1' if mdv[r] == 1.0 else ''})"
            )
        if e in (3.0, 4.0):
            _reset(cur, t, where, e)
            if e == 3.0:
                a = amt[r]
                if math.isfinite(a) and a != 0:
                    raise EventTableError(
                        f"{where}: a reset record (EVID 3) with AMT {a:g}: a reset and dose is "
                        "EVID 4"
                    )
                if mdv[r] == 0.0:
                    raise EventTableError(f"{where}: MDV=0 on a reset record (EVID 3)")
                continue
        if e == 2.0:
            continue
        if e == 0.0:
            a = amt[r]
            if math.isfinite(a) and a != 0:
                raise EventTableError(
                    f"{where}: an observation record (EVID 0) with AMT {a:g}: a dose needs "
                    "EVID 1 (or no EVID column), on its own record"
                )
            if mdv[r] == 1.0:
                continue
            if not math.isfinite(dv[r]):
                raise EventTableError(
                    f"{where}: an observation record (EVID 0) without a DV; set MDV=1 to skip it"
                )
            d_id = None
            if has_dvid:
                d_id = dvid[r]
                if math.isnan(d_id):
                    raise EventTableError(
                        f"{where}: an observation record without a DVID (the table has a DVID "
                        "column: give every observation its endpoint)"
                    )
                if not float(d_id).is_integer():
                    raise EventTableError(
                        f"{where}: DVID {d_id:g} is not an endpoint number (a whole number)"
                    )
                d_id = int(d_id)
            c = cmt[r]
            if not math.isnan(c):
                if not (c >= 1 and float(c).is_integer()):
                    raise EventTableError(
                        f"{where}: CMT {c:g} is not a compartment number (1, 2, ...)"
                    )
                obs_cmt.setdefault((d_id, int(c)), where)
                same = [(k, w) for k, w in obs_cmt.items() if k[0] == d_id]
                if len(same) > 1:
                    ((_, c1), w1), ((_, c2), w2) = same[:2]
                    if d_id is None:
                        raise EventTableError(
                            f"observations in compartments {c1} ({w1}) and {c2} ({w2}): CMT on "
                            "observation records does not select an endpoint; give the table a "
                            "DVID column and the model observe={dvid: expression, ...}"
                        )
                    raise EventTableError(
                        f"observations of DVID {d_id} in compartments {c1} ({w1}) and {c2} "
                        f"({w2}): the endpoint of an observation is its DVID, so the records of "
                        "one DVID name one compartment"
                    )
            lim = limit[r]
            if ce == 0.0 and math.isfinite(lim):
                raise EventTableError(
                    f"{where}: LIMIT {lim:g} on an observed record (CENS 0): a limit on "
                    "observed values (nlmixr2's M2) is not supported; LIMIT bounds censored "
                    "observations (CENS 1 or -1)"
                )
            wrong = limit_side(ce, lim, dv[r])
            if wrong:
                raise EventTableError(f"{where}: {wrong}")
            cur["t"].append(t)
            cur["dv"].append(dv[r])
            cur["rows"].append(row)
            cur["cens"].append(ce)
            cur["limit"].append(lim)
            cur["dvid"].append(d_id)
            continue
        if mdv[r] == 0.0:
            raise EventTableError(
                f"{where}: MDV=0 on a dose record (EVID {e:g}): a dose is not an observation; "
                "give the observation its own record (EVID 0)"
            )
        # a dose
        a = amt[r]
        if not math.isfinite(a):
            raise EventTableError(f"{where}: a dose (EVID 1) with a missing AMT")
        if a <= 0:
            raise EventTableError(f"{where}: a dose amount must be positive, got AMT {a:g}")
        ssr = 0.0 if math.isnan(ss[r]) else ss[r]
        if ssr not in (0.0, 1.0, 2.0):
            raise EventTableError(
                f"{where}: SS={ssr:g} is not supported (0: none, 1: steady state that resets "
                "the state, 2: steady state added to the state)"
            )
        c = cmt[r]
        if math.isnan(c):
            c = 1.0
        if not (c >= 1 and float(c).is_integer()):
            raise EventTableError(f"{where}: CMT {c:g} is not a compartment number (1, 2, ...)")
        if n_states is not None and c > n_states:
            raise EventTableError(
                f"{where}: CMT {int(c)} is not a compartment of the model (it has {n_states})"
            )
        rt, du = np.nan_to_num(rate[r]), np.nan_to_num(dur[r])
        modelled = int(rt) if rt in (-1.0, -2.0) and du == 0 else 0
        if (rt < 0 and not modelled) or du < 0:
            raise EventTableError(
                f"{where}: RATE {rt:g} / DUR {du:g}: the modelled codes are RATE=-1 (the rate "
                "from the model, NONMEM's R1) and RATE=-2 (the duration, D1), without DUR; "
                "give RATE or DUR as positive numbers otherwise"
            )
        duration = 0.0
        if modelled:
            if ssr in (1.0, 2.0):
                raise EventTableError(
                    f"{where}: a steady-state dose (SS={ssr:g}) with a modelled "
                    f"{'rate' if modelled == -1 else 'duration'} (RATE={modelled}) is not "
                    "supported"
                )
        elif rt > 0:
            duration = a / rt
            if du > 0 and abs(du - duration) > 1e-9 * max(1.0, du):
                raise EventTableError(
                    f"{where}: RATE {rt:g} and DUR {du:g} disagree (AMT/RATE = {duration:g})"
                )
        elif du > 0:
            duration = du
        n_add, step = np.nan_to_num(addl[r]), np.nan_to_num(ii[r])
        if n_add < 0 or not float(n_add).is_integer():
            raise EventTableError(f"{where}: ADDL must be a whole number >= 0, got {n_add:g}")
        if n_add > 0 and not step > 0:
            raise EventTableError(f"{where}: ADDL {int(n_add)} needs an interval II > 0")
        ss_ii = 0.0
        if ssr in (1.0, 2.0):
            if not step > 0:
                raise EventTableError(f"{where}: a steady-state dose (SS={ssr:g}) needs II > 0")
            if duration >= step:
                raise EventTableError(
                    f"{where}: a steady-state infusion must be shorter than its interval "
                    f"(duration {duration:g} >= II {step:g})"
                )
            ss_ii = float(step)
        for k in range(int(n_add) + 1):
            cur["doses"].append(
                Dose(
                    t + k * step,
                    a,
                    int(c) - 1,
                    duration,
                    row,
                    ss_ii if k == 0 else 0.0,
                    ssr == 2.0 and k == 0,
                    modelled,
                )  # fmt: skip
            )
    out = []
    for s in subjects:
        doses = sorted(s["doses"], key=lambda d: d.time)
        out.append(
            Subject(
                id=s["id"],
                doses=doses,
                times=np.array(s["t"], dtype=np.float64),
                dv=np.array(s["dv"], dtype=np.float64),
                rows=np.array(s["rows"], dtype=np.int64),
                covariates={k: float(v) for k, v in s["cov"].items()},
                covariate_changes=tuple(sorted(s["changes"])),
                covariate_history=tuple(s["history"]),
                cens=np.array(s["cens"], dtype=np.float64) if has_cens else None,
                limit=np.array(s["limit"], dtype=np.float64) if has_cens else None,
                dvid=np.array(s["dvid"], dtype=np.int64) if has_dvid else None,
                resets=tuple(s["resets"]),
            )
        )
    return EventData(out, covariates)


def _reset(cur, t, where, e) -> None:
    """A reset at ``t`` of the subject being read: the doses recorded so far cut there (an
    infusion running at ``t`` ends at ``t``, those due at or after ``t`` are not given)."""
    if cur["t"] and cur["t"][-1] == t:
        raise EventTableError(
            f"{where}: a reset (EVID {e:g}) at the time of an observation recorded before it: "
            "here an observation sees the events at its time, so it would see the reset; give "
            "the observation its own time, or record it after the reset"
        )
    kept = []
    for d in cur["doses"]:
        if d.time >= t:
            continue
        if d.modelled:
            raise EventTableError(
                f"{where}: a reset (EVID {e:g}) after the dose of row {d.row}, whose "
                f"{'rate' if d.modelled == -1 else 'duration'} the model gives "
                f"(RATE={d.modelled}), is not supported"
            )
        if d.duration > 0 and d.time + d.duration > t:
            if d.ss_interval > 0:
                raise EventTableError(
                    f"{where}: a reset (EVID {e:g}) during the steady-state infusion of row "
                    f"{d.row} is not supported"
                )
            d = Dose(d.time, d.rate * (t - d.time), d.state, t - d.time, d.row)
        kept.append(d)
    cur["doses"] = kept
    cur["resets"].append(float(t))


def theophylline() -> EventData:
    """The shipped Theophylline data (12 subjects, 132 observations) as an event table: one
    oral dose at time 0 into compartment 1 of ``Dose (mg/kg) * Wt (kg)`` mg (as nlmixr2data's
    ``theo_sd``), concentrations in mg/L, times in h; covariates ``WT`` (kg) and ``DOSE``
    (mg/kg)."""
    from ..datasets import load_theophylline

    subjects = []
    row = 0
    for s in load_theophylline():
        row += 1
        dose = Dose(0.0, s.dose * s.weight, 0, 0.0, row)
        rows = np.arange(row + 1, row + 1 + s.times.size)
        row += s.times.size
        subjects.append(
            Subject(
                id=s.id,
                doses=[dose],
                times=s.times.astype(np.float64),
                dv=s.conc.astype(np.float64),
                rows=rows,
                covariates={"WT": float(s.weight), "DOSE": float(s.dose)},
            )
        )
    return EventData(subjects, ("WT", "DOSE"))
