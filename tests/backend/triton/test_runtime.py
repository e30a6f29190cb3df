"""runtime.alias: the views the generated wrapper makes without dispatch equal as_strided's."""

from __future__ import annotations

import pytest
import torch
from framejit.backend.triton import runtime


def _implementations() -> list:
    found = [pytest.param(runtime._as_strided, id="python")]
    from framejit.guards import guard

    extension = getattr(guard._tensor_check, "alias_view", None)
    marks = [] if extension else [pytest.mark.skip(reason="framejit's C++ extension not built")]
    found.append(pytest.param(extension, id="extension", marks=marks))
    return found


def _bases() -> list[torch.Tensor]:
    grid = torch.arange(96, dtype=torch.float32).reshape(8, 12)
    return [
        grid,
        grid[1:, 2:],  # a storage offset and a row stride wider than the row
        grid.t(),
        torch.arange(40, dtype=torch.int64)[::2],
        torch.randn(6, 4).to(torch.bfloat16),
        torch.nn.Parameter(torch.randn(4, 6)),
        torch.empty(0, 5),
    ]


@pytest.mark.parametrize("alias", _implementations())
@pytest.mark.parametrize("base", range(len(_bases())))
def test_alias_is_as_strided_over_the_same_memory(alias, base) -> None:
    t = _bases()[base]
    sizes, strides = ((2, 3) if t.numel() else (0, 3)), (1, 2)
    delta = 1 if t.numel() else 0
    with torch.no_grad():
        expected = t.as_strided(sizes, strides, t.storage_offset() + delta)
        got = alias(t, sizes, strides, delta)
        assert (got.shape, got.stride(), got.dtype, got.device) == (
            expected.shape,
            expected.stride(),
            expected.dtype,
            expected.device,
        )
        assert got.storage_offset() == expected.storage_offset()
        assert torch.equal(got, expected)
        if alias is not runtime._as_strided:
            assert not got.requires_grad  # no autograd history (as_strided's may have one)
        if got.numel():
            got.fill_(7)  # writes land in the base's memory
            assert torch.equal(expected, torch.full_like(expected, 7))


@pytest.mark.parametrize("alias", _implementations())
def test_alias_in_and_of_inference_mode(alias) -> None:
    x = torch.arange(12.0)
    with torch.inference_mode():
        inside = alias(x, (3, 2), (4, 1), 2)
        assert inside.tolist() == [[2, 3], [6, 7], [10, 11]]
        y = torch.arange(12.0)
    outside = alias(y, (2,), (5,), 1)
    assert outside.tolist() == [1, 6] and (outside * 2).tolist() == [2, 12]


def test_the_extension_refuses_bad_arguments() -> None:
    from framejit.guards import guard

    extension = getattr(guard._tensor_check, "alias_view", None)
    if extension is None:
        pytest.skip("framejit's C++ extension not built")
    x = torch.zeros(4)
    with pytest.raises(TypeError, match="sizes and strides"):
        extension(x, (2, 2), (1,), 0)
    with pytest.raises(TypeError):
        extension([1, 2], (2,), (1,), 0)
