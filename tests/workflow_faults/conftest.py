import pytest

from fault_support import calls


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()
    yield
    calls.clear()
