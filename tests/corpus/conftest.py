"""Every corpus case starts from empty framejit caches and the same seed."""

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_framejit():
    import framejit

    framejit.reset()
    torch.manual_seed(0)
    yield
    framejit.reset()
