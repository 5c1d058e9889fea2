"""Records as clinics write them (issue 29, item 2): censoring columns, reserved columns refused
by name, text columns encoded or refused, comment rows, non-finite values, AMT/CMT/MDV on
the wrong records. Nothing in a table is dropped without a word."""

import numpy as np
import pytest

from scichains import pk


def read(tmp_path, text, **kwargs):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return pk.read_events(path, **kwargs)


HEAD = "ID,TIME,DV,AMT,EVID\n1,0,.,100,1\n"


def test_cens_and_limit_are_read(tmp_path):
    data = read(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,CENS,LIMIT\n"
        "1,0,.,100,1,.,.\n"
        "1,1,5.2,.,0,0,.\n"
        "1,12,0.5,.,0,1,.\n"  # below the LLOQ 0.5
        "1,24,0.5,.,0,1,0\n"  # in (0, 0.5)
        "2,0,.,100,1,0,\n"
        "2,1,20,.,0,-1,-Inf\n"  # above 20 (an infinite LIMIT, either sign, is none)
        "2,2,20,.,0,-1,40\n"  # in (20, 40)
        "2,3,7.5,.,0,0,-Inf\n",
    )
    s1, s2 = data.subjects
    np.testing.assert_array_equal(s1.cens, [0, 1, 1])
    np.testing.assert_array_equal(s1.limit, [np.nan, np.nan, 0.0])
    np.testing.assert_array_equal(s2.cens, [-1, -1, 0])
    np.testing.assert_array_equal(s2.limit, [-np.inf, 40.0, -np.inf])
    assert data.n_censored == 4 and s1.n_censored == 2
    plain = read(tmp_path, HEAD + "1,1,5,.,0\n")
    assert plain.subjects[0].cens is None and plain.n_censored == 0


@pytest.mark.parametrize(
    "row, match",
    [
        ("1,1,5,.,0,2,.", "CENS 2 is not 0"),
        ("1,1,5,.,0,0,1", "LIMIT 1 on an observed record .* M2"),
        ("1,1,5,.,0,1,6", "LIMIT 6 must be below DV 5 for CENS=1"),
        ("1,1,5,.,0,-1,4", "LIMIT 4 must be above DV 5 for CENS=-1"),
        ("1,1,.,50,1,1,.", "CENS 1 on a record that is not an observation"),
    ],
)
def test_bad_censoring_records(tmp_path, row, match):
    with pytest.raises(pk.EventTableError, match=f"subject ID 1, row 2: {match}"):
        read(tmp_path, "ID,TIME,DV,AMT,EVID,CENS,LIMIT\n1,0,.,100,1,0,.\n" + row + "\n")


@pytest.mark.parametrize("column", ["BLQ", "LLOQ", "L2"])
def test_reserved_columns_are_refused_by_name_never_covariates(tmp_path, column):
    text = f"ID,TIME,DV,AMT,EVID,{column}\n1,0,.,100,1,1\n1,1,5,.,0,1\n"
    with pytest.raises(pk.EventTableError, match=f"column {column}: .*drop=\\['{column}'\\]"):
        read(tmp_path, text)
    data = read(tmp_path, text, drop=[column.lower()])
    assert data.covariates == () and data.n_obs == 1


def test_occ_is_read_as_the_occasion_covariate(tmp_path):
    data = read(tmp_path, "ID,TIME,DV,AMT,EVID,OCC\n1,0,.,100,1,1\n1,1,5,.,0,1\n1,24,.,100,1,2\n")
    s = data.subjects[0]
    assert data.covariates == ("OCC",) and s.covariates["OCC"] == 1.0
    assert [(t, v["OCC"]) for t, _, v in s.covariate_history] == [(24.0, 2.0)]


def test_text_columns_are_encoded_or_refused_never_dropped(tmp_path):
    text = (
        "ID,TIME,DV,AMT,EVID,SEX,WT,NOTE\n"
        "1,0,.,100,1,M,70,first dose\n"
        "1,1,5,.,0,M,70,\n"
        "2,0,.,100,1,F,60,.\n"
        "2,1,4,.,0,.,60,ok\n"
    )
    with pytest.raises(pk.EventTableError, match=r"column SEX holds text \('F', 'M'\)"):
        read(tmp_path, text, drop=["NOTE"])
    with pytest.raises(pk.EventTableError, match="column NOTE holds text"):
        read(tmp_path, text, categories={"sex": {"M": 0, "F": 1}})
    data = read(tmp_path, text, categories={"sex": {"M": 0, "F": 1}}, drop=["note"])
    assert data.covariates == ("SEX", "WT")
    assert [s.covariates["SEX"] for s in data.subjects] == [0.0, 1.0]
    # a missing value carries the previous one forward, as for numbers
    assert data.subjects[1].covariate_changes == ()
    with pytest.raises(pk.EventTableError, match=r"row 3: column SEX holds 'F', which"):
        read(tmp_path, text, categories={"SEX": {"M": 0}}, drop=["NOTE"])
    with pytest.raises(pk.EventTableError, match="categories names AGE"):
        read(tmp_path, text, categories={"AGE": {}}, drop=["NOTE"])
    with pytest.raises(pk.EventTableError, match="drop names HEIGHT"):
        read(tmp_path, text, drop=["HEIGHT"])
    # a text value in a known column is an error, as before
    with pytest.raises(pk.EventTableError, match="column AMT holds 'ten'"):
        read(tmp_path, HEAD + "1,1,5,ten,0\n")


def test_comment_rows_are_skipped(tmp_path):
    # NONMEM's IGNORE=# / IGNORE=@: a commented record at a subject boundary was read as a
    # subject '#2'; the rows keep their numbers in the file
    data = read(
        tmp_path,
        "#ID,TIME,DV,AMT,EVID\n"
        "1,0,.,100,1\n"
        "1,1,5,.,0\n"
        "#2,0,.,100,1\n"
        "@ a note,,,,\n"
        "3,0,.,100,1\n"
        "3,2,4,.,0\n",
    )
    assert [s.id for s in data.subjects] == [1, 3]
    np.testing.assert_array_equal(data.subjects[1].rows, [6])
    assert data.subjects[1].doses[0].row == 5
    with pytest.raises(pk.EventTableError, match="subject ID 3, row 6: TIME 1 is earlier"):
        read(
            tmp_path, "ID,TIME,DV,AMT,EVID\n1,0,.,100,1\n# x\n#\n3,0,.,1,1\n3,2,4,.,0\n3,1,4,.,0\n"
        )


def test_comment_rows_of_a_data_frame_are_skipped():
    class Frame:  # what read_events needs of a pandas DataFrame
        def __init__(self, cols):
            self.cols = cols
            self.columns = list(cols)

        def __getitem__(self, k):
            class Col:
                def __init__(self, v):
                    self.v = v

                def to_numpy(self):
                    return np.array(self.v, dtype=object)

            return Col(self.cols[k])

    frame = Frame(
        {
            "ID": [1, 1, "#2", 3, 3],
            "TIME": [0, 1, 0, 0, 1],
            "DV": [None, 5.0, None, None, 4.0],
            "AMT": [100, None, 100, 100, None],
            "SEX": ["M", "M", "F", "F", "F"],
        }
    )
    data = pk.read_events(frame, categories={"SEX": {"M": 0, "F": 1}})
    assert [s.id for s in data.subjects] == [1, 3]
    assert data.subjects[1].covariates == {"SEX": 1.0}


@pytest.mark.parametrize(
    "row, match",
    [
        ("1,1,inf,.,0", r"row 2 \(ID 1\): column DV holds inf, not a finite number"),
        ("1,1,-inf,.,0", "column DV holds -inf"),
        ("1,2,.,inf,1", "column AMT holds inf"),
    ],
)
def test_infinite_values_are_refused_as_not_finite_not_missing(tmp_path, row, match):
    with pytest.raises(pk.EventTableError, match=match):
        read(tmp_path, HEAD + row + "\n")
    with pytest.raises(pk.EventTableError, match="column WT holds inf"):
        read(tmp_path, "ID,TIME,DV,AMT,EVID,WT\n1,0,.,100,1,inf\n")


def test_amt_cmt_and_mdv_on_the_wrong_records_are_refused(tmp_path):
    with pytest.raises(pk.EventTableError, match="row 2: an observation record .* with AMT 5"):
        read(tmp_path, HEAD + "1,1,3,5,0\n")
    # AMT 0 on an observation is fine
    assert read(tmp_path, HEAD + "1,1,3,0,0\n").n_obs == 1
    two = "ID,TIME,DV,AMT,EVID,CMT\n1,0,.,100,1,1\n1,1,3,.,0,2\n1,2,3,.,0,3\n"
    with pytest.raises(pk.EventTableError, match="observations in compartments 2 .* and 3"):
        read(tmp_path, two)
    one = read(tmp_path, "ID,TIME,DV,AMT,EVID,CMT\n1,0,.,100,1,1\n1,1,3,.,0,2\n1,2,3,.,0,2\n")
    assert one.n_obs == 2
    with pytest.raises(pk.EventTableError, match="row 2: CMT 1.5 is not a compartment"):
        read(tmp_path, "ID,TIME,DV,AMT,EVID,CMT\n1,0,.,100,1,1\n1,1,3,.,0,1.5\n")
    with pytest.raises(pk.EventTableError, match="row 1: MDV=0 on a dose record"):
        read(tmp_path, "ID,TIME,DV,AMT,EVID,MDV\n1,0,0,100,1,0\n1,1,3,.,0,0\n")
    with pytest.raises(pk.EventTableError, match="EVID 5 is not supported"):
        read(tmp_path, HEAD + "1,1,.,.,5\n")
    with pytest.raises(pk.EventTableError, match="EVID 101 is not supported"):
        read(tmp_path, HEAD + "1,1,.,100,101\n")


def test_exclude_leaves_records_out_as_nonmem_ignore(tmp_path):
    text = (
        "ID,TIME,DV,AMT,EVID,DVID,FLAG\n"
        "1,0,.,100,1,.,ok\n1,1,5,.,0,1,ok\n1,1,60,.,0,2,ok\n1,2,4,.,0,1,bad\n1,2,55,.,0,2.0,ok\n"
    )
    data = read(tmp_path, text, exclude={"DVID": 2, "FLAG": "bad"}, drop=["FLAG"])
    s = data.subjects[0]
    np.testing.assert_array_equal(s.dv, [5.0])
    np.testing.assert_array_equal(s.rows, [2])  # the file's rows
    both = read(tmp_path, text, exclude={"dvid": [2]}, drop=["FLAG"])
    np.testing.assert_array_equal(both.subjects[0].dv, [5.0, 4.0])
    with pytest.raises(pk.EventTableError, match="exclude names OCC, which is not a column"):
        read(tmp_path, text, exclude={"OCC": 1})
