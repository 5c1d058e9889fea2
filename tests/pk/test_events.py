"""NONMEM-style event tables: columns, dose kinds, and errors that name subject and row."""

import numpy as np
import pytest

from scichains import pk


def write(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_columns_are_case_insensitive_and_records_split_into_doses_and_observations(tmp_path):
    path = write(
        tmp_path,
        "id,Time,dv,AMT,evid,Cmt,MDV,wt\n"
        "1,0,.,100,1,1,1,70\n"
        "1,0,0.5,0,0,2,0,70\n"
        "1,1,3.0,0,0,2,0,70\n"
        "1,1,3.2,0,0,2,0,70\n"  # replicate at the same time
        "1,2,.,0,0,2,1,70\n"  # MDV=1: not an observation
        "2,0,.,50,1,2,1,60\n"
        "2,4,1.5,0,0,2,0,60\n"
        "2,30,.,50,1,1,1,60\n",  # a dose after the last observation is fine
    )
    data = pk.read_events(path)
    assert [s.id for s in data.subjects] == [1, 2]
    assert data.covariates == ("WT",)
    s1, s2 = data.subjects
    assert s1.doses == [pk.Dose(0.0, 100.0, 0, 0.0, 1)]
    np.testing.assert_array_equal(s1.times, [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(s1.dv, [0.5, 3.0, 3.2])
    np.testing.assert_array_equal(s1.rows, [2, 3, 4])
    assert s1.covariates == {"WT": 70.0}
    assert [d.state for d in s2.doses] == [1, 0]
    assert data.n_obs == 4


def test_evid_is_inferred_from_amt_and_defaults_fill_missing_columns(tmp_path):
    data = pk.read_events(write(tmp_path, "ID,TIME,DV,AMT\n1,0,,10\n1,1,2.5,0\n1,2,2.0,\n"))
    s = data.subjects[0]
    assert s.doses == [pk.Dose(0.0, 10.0, 0, 0.0, 1)]
    np.testing.assert_array_equal(s.times, [1.0, 2.0])


def test_infusions_by_rate_or_duration_and_repeated_doses(tmp_path):
    data = pk.read_events(
        write(
            tmp_path,
            "ID,TIME,DV,AMT,RATE,DUR,II,ADDL\n"
            "1,0,.,100,50,0,12,2\n"  # 2 h infusions at 0, 12, 24
            "1,1,1.0,0,0,0,0,0\n"
            "2,0,.,100,0,4,0,0\n"  # 4 h infusion given by DUR
            "2,5,1.0,0,0,0,0,0\n",
        )
    )
    d1 = data.subjects[0].doses
    assert [d.time for d in d1] == [0.0, 12.0, 24.0]
    assert all(d.duration == 2.0 and d.rate == 50.0 for d in d1)
    d2 = data.subjects[1].doses
    assert d2[0].duration == 4.0 and d2[0].rate == 25.0


@pytest.mark.parametrize(
    "body, match",
    [
        ("1,0,.,-5,1\n1,1,2,0,0\n", r"subject ID 1, row 1: a dose amount must be positive"),
        ("1,0,.,.,1\n1,1,2,0,0\n", r"subject ID 1, row 1: a dose \(EVID 1\) with a missing AMT"),
        ("1,0,.,5,1\n1,2,2,0,0\n1,1,2,0,0\n", r"subject ID 1, row 3: TIME 1 is earlier"),
        ("1,0,.,5,1\n1,1,.,0,0\n", r"subject ID 1, row 2: an observation record .* without a DV"),
        ("1,0,.,5,1\n2,1,2,0,0\n1,2,2,0,0\n", r"subject ID 1, row 3: .* not contiguous"),
        ("1,0,.,5,3\n", r"subject ID 1, row 1: a reset record \(EVID 3\) with AMT 5"),
        ("1,0,.,5,101\n", r"EVID 101 is not supported"),
        (",0,.,5,1\n", r"row 1: the ID is missing"),
        ("1,x,.,5,1\n", r"row 1: column TIME holds 'x'"),
    ],
)
def test_bad_records_name_subject_and_row(tmp_path, body, match):
    path = write(tmp_path, "ID,TIME,DV,AMT,EVID\n" + body)
    with pytest.raises(pk.EventTableError, match=match):
        pk.read_events(path)


def test_unknown_compartment_ss_addl_and_rate_errors(tmp_path):
    head = "ID,TIME,DV,AMT,EVID,CMT,SS,II,ADDL,RATE,DUR\n"
    cases = [
        ("7,0,.,5,1,3,0,0,0,0,0\n", r"subject ID 7, row 1: CMT 3 is not a compartment", 2),
        ("7,0,.,5,1,0,0,0,0,0,0\n", r"subject ID 7, row 1: CMT 0 is not a compartment", None),
        ("7,0,.,5,1,1,3,12,0,0,0\n", r"row 1: SS=3 is not supported", None),
        ("7,0,.,5,1,1,1,0,0,0,0\n", r"row 1: a steady-state dose \(SS=1\) needs II > 0", None),
        ("7,0,.,5,1,1,1,12,0,0,12\n", r"row 1: a steady-state infusion must be shorter", None),
        ("7,0,.,5,1,1,0,0,2,0,0\n", r"row 1: ADDL 2 needs an interval II", None),
        ("7,0,.,5,1,1,0,0,0,-3,0\n", r"row 1: RATE -3 .* modelled codes are RATE=-1", None),
        ("7,0,.,5,1,1,0,0,0,-2,3\n", r"row 1: RATE -2 / DUR 3: .* without DUR", None),
        ("7,0,.,5,1,1,0,0,0,1,3\n", r"row 1: RATE 1 and DUR 3 disagree", None),
    ]
    for body, match, n in cases:
        with pytest.raises(pk.EventTableError, match=match):
            pk.read_events(write(tmp_path, head + body), n_states=n)


def test_unknown_compartment_is_refused_against_the_model(tmp_path):
    data = pk.read_events(write(tmp_path, "ID,TIME,DV,AMT,CMT\n4,0,.,5,3\n4,1,1.0,0,1\n"))
    with pytest.raises(pk.EventTableError, match=r"subject ID 4, row 1: CMT 3 .* has 2"):
        data.check_states(2)


def test_duplicate_and_missing_columns(tmp_path):
    with pytest.raises(pk.EventTableError, match="columns named twice"):
        pk.read_events(write(tmp_path, "ID,time,TIME\n1,0,0\n"))
    with pytest.raises(pk.EventTableError, match="needs an TIME column"):
        pk.read_events(write(tmp_path, "ID,DV\n1,0\n"))
    with pytest.raises(TypeError, match="file path or a pandas DataFrame"):
        pk.read_events(42)


def test_dataframe_input_matches_csv(tmp_path):
    pd = pytest.importorskip("pandas")
    text = "ID,TIME,DV,AMT,EVID,WT\n1,0,,100,1,70\n1,1,3.0,0,0,70\n2,0,,80,1,60\n2,2,1.0,0,0,60\n"
    a = pk.read_events(write(tmp_path, text))
    df = pd.read_csv(tmp_path / "data.csv")
    df.columns = [c.lower() for c in df.columns]
    b = pk.read_events(df)
    assert [s.id for s in a.subjects] == [s.id for s in b.subjects]
    for sa, sb in zip(a.subjects, b.subjects):
        assert sa.doses == sb.doses
        np.testing.assert_array_equal(sa.times, sb.times)
        np.testing.assert_array_equal(sa.dv, sb.dv)
        assert sa.covariates == sb.covariates


def test_theophylline_event_table_has_doses_in_mg():
    data = pk.theophylline()
    assert len(data) == 12 and data.n_obs == 132
    s1 = data.subjects[0]
    # nlmixr2data's theo_sd: ID 1, AMT 319.992 mg = 4.02 mg/kg * 79.6 kg
    assert s1.doses[0].amount == pytest.approx(319.992)
    assert s1.doses[0].state == 0 and s1.doses[0].time == 0.0
    assert s1.times[0] == 0.0 and s1.dv[0] == pytest.approx(0.74)


def test_with_observations_replaces_the_dvs_only():
    data = pk.theophylline()
    dv = np.arange(data.n_obs, dtype=np.float64)
    new = data.with_observations(dv)
    assert len(new) == len(data) and new.covariates == data.covariates
    k = 0
    for a, b in zip(data.subjects, new.subjects):
        np.testing.assert_array_equal(b.dv, dv[k : k + a.n_obs])
        k += a.n_obs
        assert b.doses == a.doses and b.covariates == a.covariates
        np.testing.assert_array_equal(b.times, a.times)
    dv[0] = -1.0  # the copy owns its arrays
    assert new.subjects[0].dv[0] == 0.0 and data.subjects[0].dv[0] != 0.0
    with pytest.raises(ValueError, match=r"dv must have shape \(132,\)"):
        data.with_observations(dv[:-1])
    with pytest.raises(ValueError, match="dv must be finite"):
        data.with_observations(np.full(data.n_obs, np.nan))


def test_with_observations_keeps_censored_values_inside_their_interval(tmp_path):
    path = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,CENS,LIMIT\n1,0,.,100,1,0,.\n1,1,5.2,.,0,0,.\n1,12,0.5,.,0,1,0\n",
    )
    data = pk.read_events(path)
    assert data.with_observations([5.0, 0.3]).subjects[0].dv[1] == 0.3
    with pytest.raises(ValueError, match=r"row 3: the new DV -0.1 of a censored observation"):
        data.with_observations([5.0, -0.1])
