import numpy as np

from scichains.datasets import load_lynx_hare


def test_lynx_hare_matches_the_published_table():
    data = load_lynx_hare()
    assert data.shape == (21, 3) and data.dtype == np.float64
    assert data[:, 0].tolist() == list(range(1900, 1921))
    # values checked against the second copy (PINTS' LotkaVolterraModel.suggested_values)
    hare, lynx = data[:, 1], data[:, 2]
    assert (hare[0], lynx[0]) == (30.0, 4.0)
    assert (hare[4], lynx[4]) == (36.3, 59.4)  # 1904, the lynx peak
    assert (hare[15], lynx[15]) == (19.5, 51.1)  # 1915
    assert hare[20] == 24.7
    # the one count where the copies differ (8.1 in PINTS): the Stan case study's value
    assert lynx[20] == 8.6
    assert np.all(data[:, 1:] > 0)
