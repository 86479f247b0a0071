import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: intra-op threads only add synchronisation, and on a busy CI machine they make a
    64-wide matmul take milliseconds instead of microseconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
