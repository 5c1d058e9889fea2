import pytest

from scichains import pk

from .models import oral_model


@pytest.fixture(scope="session")
def theoph_fit():
    """The FOCE-I fit of nlmixr2's one-compartment model to the Theophylline data."""
    model = oral_model()
    data = pk.theophylline()
    return model, data, pk.fit(model, data)
