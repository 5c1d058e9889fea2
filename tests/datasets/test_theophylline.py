import numpy as np

from scichains.datasets import load_theophylline


def test_theophylline_matches_the_published_table():
    subjects = load_theophylline()
    assert [s.id for s in subjects] == list(range(1, 13))
    assert sum(s.times.size for s in subjects) == 132
    s1 = subjects[0]
    assert (s1.weight, s1.dose) == (79.6, 4.02)
    assert s1.times[0] == 0.0 and s1.conc[0] == 0.74  # the pre-dose value of the original data
    assert s1.conc[:4].tolist() == [0.74, 2.84, 6.57, 10.5]
    for s in subjects:
        assert np.all(np.diff(s.times) > 0) and np.all(s.conc >= 0)
