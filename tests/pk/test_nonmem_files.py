"""NONMEM data files as written (issue 29, item 4): comma- or whitespace-separated, with a
header or the names of ``$INPUT``, ``#``/``@`` comment rows, ``IGNORE=@`` and ``IGNORE=C``,
``.`` for missing; each read the same as the plain CSV of the same records."""

import numpy as np
import pytest

from scichains import pk

CSV = (
    "ID,TIME,AMT,DV,EVID,CMT,WT\n"
    "1,0,320,.,1,1,79.6\n"
    "1,0.5,.,4.4,0,2,79.6\n"
    "1,1,.,6.9,0,2,79.6\n"
    "# a comment row\n"
    "1,4,.,8.2,0,2,79.6\n"
    "2,0,320,.,1,1,72.4\n"
    "2,0.5,.,2.1,0,2,72.4\n"
    "2,2,.,8.6,0,2,.\n"
)


def write(tmp_path, text, name="data.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def same(a, b):
    assert a.covariates == b.covariates and len(a) == len(b)
    for s, t in zip(a.subjects, b.subjects):
        assert s.id == t.id and s.doses == t.doses and s.covariates == t.covariates
        for key in ("times", "dv", "rows"):
            np.testing.assert_array_equal(getattr(s, key), getattr(t, key))


def test_whitespace_separated_files_read_as_the_csv(tmp_path):
    want = pk.read_events(write(tmp_path, CSV, "data.csv"))
    assert want.n_obs == 5 and want.subjects[1].covariates == {"WT": 72.4}
    # blanks and tabs, a '@' comment row in place of the '#' one, blank lines (not counted)
    text = CSV.replace(",", "  ").replace("# a comment", "@ a comment")
    text = text.replace("1  0.5", "1\t0.5").replace("2  0  320", "\n2  0  320")
    got = pk.read_events(write(tmp_path, text))
    same(got, want)
    assert list(got.subjects[0].rows) == [2, 3, 5]  # the comment row counts, as in the CSV
    same(pk.read_events(write(tmp_path, text), sep="whitespace"), want)
    # comma-separated with blanks after the commas (sep found from the header)
    same(pk.read_events(write(tmp_path, CSV.replace(",", ", "))), want)


def test_files_without_a_header_take_the_names_of_input(tmp_path):
    want = pk.read_events(write(tmp_path, CSV, "data.csv"))
    names = ["ID", "TIME", "AMT", "DV", "EVID", "CMT", "WT"]
    body = CSV.split("\n", 1)[1]
    same(pk.read_events(write(tmp_path, body), names=names), want)
    # a NONMEM table file: a title line and its header repeated, skipped by IGNORE=@
    table = "TABLE NO. 1\n ID TIME AMT DV EVID CMT WT\n" + body.replace(",", " ")
    table = table.replace("2 0 320", "TABLE NO. 2\n ID TIME AMT DV EVID CMT WT\n2 0 320")
    got = pk.read_events(write(tmp_path, table), names=names, ignore="@")
    same_values = [(s.id, list(s.times), list(s.dv)) for s in got.subjects]
    assert same_values == [(s.id, list(s.times), list(s.dv)) for s in want.subjects]
    with pytest.raises(pk.EventTableError, match="row 1: 3 fields but names gives 7"):
        pk.read_events(write(tmp_path, table), names=names)
    with pytest.raises(pk.EventTableError, match="row 3: 6 fields but names gives 7 columns"):
        pk.read_events(
            write(tmp_path, body.replace("1,1,.,6.9,0,2,79.6", "1,1,.,6.9,0,2")), names=names
        )


def test_ignore_c_skips_the_flagged_rows(tmp_path):
    # NONMEM's C column: rows flagged C are left out ($INPUT C=DROP ..., IGNORE=C)
    text = "C,ID,TIME,AMT,DV\n.,1,0,100,.\nC,1,1,.,99\n.,1,2,.,5\n"
    data = pk.read_events(write(tmp_path, text, "c.csv"), ignore="C", drop=["C"])
    np.testing.assert_array_equal(data.subjects[0].dv, [5.0])
    assert list(data.subjects[0].rows) == [3] and data.covariates == ()
    # without it, the flagged row is a record (its DV an observation)
    assert pk.read_events(write(tmp_path, text, "c.csv"), drop=["C"]).n_obs == 2


def test_bad_file_options_are_refused(tmp_path):
    path = write(tmp_path, CSV, "data.csv")
    with pytest.raises(ValueError, match="sep must be ',', 'whitespace' or None"):
        pk.read_events(path, sep=";")
    with pytest.raises(ValueError, match="ignore must be one character"):
        pk.read_events(path, ignore="CC")

    class Frame:  # anything with columns and df[c].to_numpy()
        columns = ["ID", "TIME"]

        def __getitem__(self, c):
            return np.array([1.0])

    with pytest.raises(TypeError, match="sep and names are read_events options for files"):
        pk.read_events(Frame(), names=["ID", "TIME"])
    with pytest.raises(pk.EventTableError, match="the file is empty"):
        pk.read_events(write(tmp_path, "\n\n"))
