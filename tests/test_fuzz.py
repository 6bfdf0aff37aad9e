"""Bad input to every mechanism, rebuilt from each mechanism's declared parameters: zero, negative, NaN, infinity, huge,
tiny, a wrong type and an unknown choice for every parameter. Each case must end in a correct fit (finite predictions)
or a ValueError that names the parameter it was given as; nothing else (no TypeError, ZeroDivisionError, KeyError,
MemoryError, numpy warning or a fit that runs on for weeks: the work estimate refuses those before they start)."""
import math, warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dpmf_lit.mechanism import mechanisms
from dpmf_lit.synthetic import synthetic

MECHANISMS = mechanisms()
BAD = {"zero": 0, "negative": -1, "nan": float("nan"), "inf": float("inf"), "huge": 1e300, "tiny": 1e-300,
       "huge int": 10**12, "wrong type": "abc", "bool": True, "unknown choice": "nope", "list": [1, 2]}
CASES = [(name, k, label) for name, cls in MECHANISMS.items() for k in cls.parameter_names() for label in BAD]


@pytest.fixture(scope="module")
def tiny():
    return synthetic(60, 40, 900, rank=3, noise=0.3, seed=3)


def outcome(name: str, k: str, value, data) -> str:
    "'fit' or 'refused'; anything else fails the test with what happened."
    cls = MECHANISMS[name]
    params = {**{p: v for p, v in cls.test_params.items() if p != k}, k: value}
    if k == "n_private": params.pop("n_private", None); params[k] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a warning that reaches the user is a failure too
        try: fit = cls(**params).fit(data)
        except ValueError as e:
            assert f"{k}=" in str(e) or f"{k} " in str(e), f"{name} {k}={value!r}: the error does not name {k}: {e}"
            return "refused"
    p = fit.predict_codes(data.user, data.item)
    assert np.isfinite(p).all(), f"{name} {k}={value!r}: non-finite predictions"
    return "fit"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name,k,label", CASES)
def test_every_bad_value_fits_or_is_refused_by_name(name, k, label, tiny):
    outcome(name, k, BAD[label], tiny)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES))
def test_a_sample_of_the_bad_values(case, tiny):
    name, k, label = case
    outcome(name, k, BAD[label], tiny)


def test_the_cases_cover_every_parameter():
    assert len(CASES) == len(BAD) * sum(len(c.parameter_names()) for c in MECHANISMS.values()) > 683
