"""The one validation rule of the library (``bounds_lib.core.validation``): wrong type → TypeError,
wrong value → ValueError, ``bool`` never a number, integral floats never integers."""
import math

import numpy as np
import pytest

from bounds_lib.core.validation import as_real_array, check_array, check_bool, check_scalar


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
    assert check_array(math.inf, "x", allow_inf=True) == math.inf  # a 0-d infinity too (an IndexError once)
    assert check_array(np.array(-math.inf), "x", allow_inf=True, max_val=0) == -math.inf
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


# ---- exact messages, defaults and boundaries (kill the mutants of `make mutation MODULES=validation`) ----

def test_type_error_messages_name_the_type_and_the_value():
    for call, msg in [
        (lambda: check_scalar(3.0, "L", int), "L must be an integer, got float 3.0"),
        (lambda: check_scalar(True, "L", int), "L must be an integer, got bool True"),
        (lambda: check_scalar(np.True_, "eps", float), "eps must be a real number, got bool np.True_"),
        (lambda: check_scalar("0.5", "eps", float), "eps must be a real number, got str '0.5'"),
        (lambda: check_bool(1, "flag"), "flag must be True or False, got int 1"),
        (lambda: check_array(True, "s"), "s must be numeric, got bool True"),
        (lambda: check_array(np.array([True]), "s"), "s must be numeric, got a boolean array"),
    ]:
        with pytest.raises(TypeError) as err:
            call()
        assert str(err.value) == msg


def test_value_error_messages_say_which_side_of_the_boundary():
    for call, msg in [
        (lambda: check_scalar(0, "L", int, min_val=1), "L == 0, must be >= 1"),
        (lambda: check_scalar(0.0, "d", float, min_val=0, include_boundaries="neither"), "d == 0.0, must be > 0"),
        (lambda: check_scalar(0.0, "d", float, min_val=0, include_boundaries="right"), "d == 0.0, must be > 0"),
        (lambda: check_scalar(1.5, "q", float, max_val=1), "q == 1.5, must be <= 1"),
        (lambda: check_scalar(1.0, "q", float, max_val=1, include_boundaries="left"), "q == 1.0, must be < 1"),
        (lambda: check_array([np.nan], "s"), "s contains NaN"),
        (lambda: check_array([-1.0], "s", min_val=0), "s contains -1.0, must be >= 0"),
        (lambda: check_array([0.0], "s", min_val=0, include_boundaries="right"), "s contains 0.0, must be > 0"),
        (lambda: check_array([2.0], "s", max_val=2, include_boundaries="neither"), "s contains 2.0, must be < 2"),
        (lambda: check_array([], "s", allow_empty=False), "s is empty"),
        (lambda: check_array([1.0], "s", include_boundaries="open"),
         "include_boundaries must be one of ('both', 'left', 'right', 'neither'), got 'open'"),
        (lambda: check_array("abc", "weights"), "weights must be a numeric array, got dtype <U3"),
    ]:
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == msg


def test_check_array_boundaries_and_defaults():
    # the boundaries themselves: accepted on the included side only
    for inc, lo_ok, hi_ok in [("both", True, True), ("left", True, False), ("right", False, True),
                              ("neither", False, False)]:
        for v, ok in ((0.0, lo_ok), (1.0, hi_ok)):
            if ok:
                assert check_array([v], "s", min_val=0, max_val=1, include_boundaries=inc).tolist() == [v]
            else:
                with pytest.raises(ValueError):
                    check_array([v], "s", min_val=0, max_val=1, include_boundaries=inc)
    assert check_array([0.0, 1.0], "s", min_val=0, max_val=1).tolist() == [0.0, 1.0]
    assert check_array([], "s").size == 0                     # empty arrays are allowed by default
    assert check_array([1.0], "s", allow_empty=False).tolist() == [1.0]
    a = np.array([1.0, 2.0])
    assert check_array(a, "s") is a                           # float64 input is not copied
    assert check_array(np.array([1.0], dtype=np.float32), "s").dtype == np.float64


def test_as_real_array_messages_and_kinds():
    for call, msg in [
        (lambda: as_real_array([1j]), "array must be real; complex arrays (complex128) are not supported"),
        (lambda: as_real_array(np.array([1j], dtype=np.complex64), "W"),
         "W must be real; complex arrays (complex64) are not supported"),
        (lambda: as_real_array(np.array([object()]), "W"), "W must be a numeric array, got dtype object"),
        (lambda: as_real_array(np.array([1], dtype="timedelta64[s]"), "W"),
         "W must be a numeric array, got dtype timedelta64[s]"),
        (lambda: as_real_array(np.array(["2020-01-01"], dtype="datetime64[D]"), "W"),
         "W must be a numeric array, got dtype datetime64[D]"),
        (lambda: as_real_array([1, 2], "W", allow_integer=False),
         "W has dtype int64; weights must be floating point (float16, bfloat16, float32 or float64)"),
    ]:
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == msg
    with pytest.raises(ValueError, match=r"^W cannot be converted to an array: "
                                         r"setting an array element with a sequence\. "):
        as_real_array([[1.0, 2.0], [3.0]], "W")
    assert as_real_array([True], "W").dtype.kind == "b" and as_real_array([1], "W").dtype.kind == "i"


def test_torch_detection_and_messages():
    from bounds_lib.core.validation import is_torch_tensor

    class NotTorch:   # has the attributes, is not a tensor
        dtype = "float32"

        def detach(self):
            return self

    assert not is_torch_tensor(NotTorch()) and not is_torch_tensor(np.ones(2))
    torch = pytest.importorskip("torch")
    assert is_torch_tensor(torch.ones(1))
    for t, msg in [
        (torch.zeros(2, dtype=torch.complex64), "W must be real; got a complex tensor (torch.complex64)"),
        (torch.zeros(2, device="meta"),
         "W cannot be copied to the CPU (device meta): Cannot copy out of meta tensor; no data!"),
        (torch.zeros(2, dtype=torch.float8_e4m3fn), "W has dtype torch.float8_e4m3fn, which has no NumPy equivalent"),
    ]:
        with pytest.raises(ValueError) as err:
            as_real_array(t, "W")
        assert str(err.value) == msg


def _check_array_outcome(x, **kw):
    try:
        a = check_array(x, "s", **kw)
    except (TypeError, ValueError) as exc:  # the refusals; anything else (an IndexError once) fails the test
        return type(exc), str(exc)
    return a.dtype, a.shape, a.tobytes(), type(a)


@pytest.mark.parametrize("inc", ["both", "left", "right", "neither"])
def test_check_array_a_float_is_checked_as_its_array(inc):
    # a Python or NumPy float takes a shorter path (no masks): the same array, the same refusals and messages
    for v in (-1.0, -0.0, 0.0, 5e-324, 0.5, 1.0, 2.0, math.nan, math.inf, -math.inf):
        for kw in ({}, {"min_val": 0}, {"max_val": 1}, {"min_val": 0, "max_val": 1},
                   {"min_val": 0.5, "max_val": 0.5}, {"allow_inf": True}, {"allow_neg_inf": True, "min_val": 0},
                   {"what": "norms are >= 0", "min_val": 0}):
            want = _check_array_outcome(np.array(v), include_boundaries=inc, **kw)  # a 0-d array: the full path
            for x in (v, np.float64(v)):
                assert _check_array_outcome(x, include_boundaries=inc, **kw) == want, (x, inc, kw)
