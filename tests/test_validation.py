"""The one validation rule of the library (``bounds_lib.validation``): wrong type → TypeError,
wrong value → ValueError, ``bool`` never a number, integral floats never integers."""
import math

import numpy as np
import pytest

from bounds_lib.validation import as_real_array, check_array, check_bool, check_scalar


@pytest.mark.parametrize("x", [3, np.int64(3), np.uint8(3)])
def test_integers_are_accepted_and_returned_as_int(x):
    v = check_scalar(x, "L", int, min_val=1)
    assert v == 3 and type(v) is int


@pytest.mark.parametrize("x", [3.0, np.float64(3.0), "3", None, 3 + 0j, True, np.True_])
def test_non_integers_are_type_errors_for_integer_parameters(x):
    with pytest.raises(TypeError, match="L must be an integer"):
        check_scalar(x, "L", int)


@pytest.mark.parametrize("x", [True, False, np.False_, "0.5", None, [0.5], 1j])
def test_non_reals_are_type_errors_for_real_parameters(x):
    with pytest.raises(TypeError, match="eps must be a real number"):
        check_scalar(x, "eps", float)


@pytest.mark.parametrize("x", [2, np.int32(2), 2.5, np.float32(2.5)])
def test_reals_are_returned_as_float(x):
    v = check_scalar(x, "eps", float)
    assert type(v) is float and v == float(x)


def test_nan_and_inf_are_value_errors():
    with pytest.raises(ValueError, match="NaN"):
        check_scalar(math.nan, "eps", float)
    with pytest.raises(ValueError, match="finite"):
        check_scalar(math.inf, "eps", float)
    with pytest.raises(ValueError, match="NaN"):
        check_scalar(math.nan, "eps", float, finite=False)
    assert check_scalar(-math.inf, "eps", float, finite=False) == -math.inf


@pytest.mark.parametrize("bounds, ok, bad", [
    ("both", [0.0, 0.5, 1.0], [-1e-12, 1 + 1e-12]),
    ("left", [0.0, 0.5], [1.0, -1e-12]),
    ("right", [0.5, 1.0], [0.0, 1.0 + 1e-9]),
    ("neither", [1e-12, 0.5], [0.0, 1.0]),
])
def test_boundaries(bounds, ok, bad):
    for x in ok:
        assert check_scalar(x, "delta", float, min_val=0, max_val=1, include_boundaries=bounds) == x
    for x in bad:
        with pytest.raises(ValueError, match=r"delta == "):
            check_scalar(x, "delta", float, min_val=0, max_val=1, include_boundaries=bounds)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="include_boundaries"):
        check_scalar(1, "x", int, include_boundaries="open")
    with pytest.raises(ValueError, match="target_type"):
        check_scalar(1, "x", str)


def test_check_bool():
    assert check_bool(True, "f") is True and check_bool(np.False_, "f") is False
    for x in (1, 0, "yes", None, 1.0):
        with pytest.raises(TypeError, match="f must be True or False"):
            check_bool(x, "f")


def test_check_array_values():
    a = check_array([1, 2, 3], "s", min_val=0)
    assert a.dtype == np.float64 and a.tolist() == [1.0, 2.0, 3.0]
    assert check_array(2, "s").shape == ()
    with pytest.raises(ValueError, match="NaN"):
        check_array([1.0, math.nan], "s")
    with pytest.raises(ValueError, match="must be finite"):
        check_array([1.0, math.inf], "s")
    with pytest.raises(ValueError, match="-inf, must be finite"):
        check_array([-math.inf], "s")
    assert check_array([-math.inf, 0.0], "log_s", allow_neg_inf=True)[0] == -math.inf
    with pytest.raises(ValueError, match="inf, must be finite"):
        check_array([math.inf], "log_s", allow_neg_inf=True)
    assert check_array([math.inf, -math.inf], "x", allow_inf=True).size == 2
    with pytest.raises(ValueError, match=r"contains -0.5, must be >= 0 \(norms are >= 0\)"):
        check_array([1.0, -0.5], "s", min_val=0, what="norms are >= 0")
    with pytest.raises(ValueError, match="must be > 0"):
        check_array([0.0], "s", min_val=0, include_boundaries="neither")
    with pytest.raises(ValueError, match="must be <= 2"):
        check_array([2.5], "p", max_val=2)
    with pytest.raises(ValueError, match="must be < 2"):
        check_array([2.0], "p", max_val=2, include_boundaries="left")
    with pytest.raises(ValueError, match="empty"):
        check_array([], "s", allow_empty=False)
    for bad in (True, np.array([True])):
        with pytest.raises(TypeError, match="numeric"):
            check_array(bad, "s")
    for bad in ([1j], ["a"], [object()]):
        with pytest.raises(ValueError):
            check_array(bad, "s")


def test_as_real_array_torch():
    torch = pytest.importorskip("torch")
    t = torch.ones(2, 2, dtype=torch.bfloat16, requires_grad=True)
    assert as_real_array(t, "W").dtype == np.float32
    with pytest.raises(ValueError, match="integer|floating point"):
        as_real_array(np.ones(2, dtype=np.int32), "W", allow_integer=False)
