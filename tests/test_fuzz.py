"""Bad input to every mechanism, rebuilt from each mechanism's declared parameters: zero, negative, NaN, infinity, huge,
tiny, a wrong type and an unknown choice for every parameter. Each case must end in a correct fit (finite predictions)
or a ValueError that names the parameter it was given as; nothing else (no TypeError, ZeroDivisionError, KeyError,
MemoryError, numpy warning or a fit that runs on for weeks: the work estimate refuses those before they start)."""
import math, re, warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dpmf_lit.model.mechanism import mechanisms
from dpmf_lit.data.synthetic import synthetic

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


# The defects a user's fuzz found, one by one: each failed before (a traceback, a wrong hint or a silent no-op).
DEFECTS = [
    ("pdp-pmf", dict(lam_u=1e300), "lam_u=1e+300 is extreme: lower it"),             # was KeyError: 'epsilon'
    ("pdp-pmf", dict(max_norm=1e300), "max_norm=1e+300 is extreme"),
    ("dp-pmf", dict(lam_u=1e300), "lam_u=1e+300 is extreme: lower it"),              # was "raise epsilon"
    ("xin", dict(mode="sslp", epsilon=1e-300, n_private=20), "epsilon=1e-300"),       # was ZeroDivisionError
    ("xin", dict(mode="laplace", epsilon=1e-300, n_private=20), "epsilon=1e-300"),    # was "Singular matrix"
    ("xin", dict(trace="weighted", zeta=0, public=0.01), "zeta=0: "),                 # was "SVD did not converge" (sparse data below)
    ("xin", dict(mode="pmd", sweeps=10**12, n_private=20), "lower sweeps"),           # ran (or allocated) for ever
    ("gauss", dict(epsilon_i=1e-300), "epsilon_i=1e-300 is extreme: raise it"),       # was "lower mu"
    ("sgld", dict(epsilon=1e300), "epsilon=1e+300 is extreme: lower it"),             # was "lower step"
    ("sgld", dict(d=40000), "lower d"),                                               # was about table_size
    ("sgld", dict(weights=True), "weights=True must be a number"),                    # was taken as 1.0
    ("sgld", dict(weights="abc"), "weights='abc'"),
    ("sgld", dict(mean=float("nan")), "mean=nan must be a finite number"),            # was "... finite number finite"
    ("dp-pmf", dict(k1=10**12), "lower k1"),                                          # ran for ever
    ("gauss", dict(J=10**12), "lower J"),
    ("hua-protocol", dict(epochs=10**12), "lower epochs"),
    ("pmf", dict(epochs=10**12), "lower epochs"),
    ("xin", dict(mode="local", epsilon=2.0), "epsilon=2.0: xin with mode='local' does not use epsilon"),   # was listed, unused
    ("xin", dict(trace="uniform", zeta=0.3), "zeta=0.3: xin with trace='uniform' does not use zeta"),
]


@pytest.mark.parametrize("name,kw,message", DEFECTS, ids=[f"{n}-{'-'.join(k)}" for n, k, _ in DEFECTS])
def test_each_reported_defect_is_refused_with_the_right_name(name, kw, message, tiny):
    cls = MECHANISMS[name]
    canon = {cls.aliases.get(k, k) for k in kw}
    params = {**{k: v for k, v in cls.test_params.items() if k not in canon and not (name == "xin" and k in ("mode", "n_private"))}, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = synthetic(300, 400, 2000, seed=3) if "zeta" in kw and kw["zeta"] == 0 else tiny   # items no public user rated
        with pytest.raises(ValueError, match=re.escape(message)): cls(**params).fit(data)


def test_sgld_says_when_the_step_is_capped(tiny):
    "A huge lr cannot change the fit past the stability cap of η: the fit says so (lr_capped) instead of listing it silently."
    big, small = (MECHANISMS["sgld"](**{**MECHANISMS["sgld"].test_params, "lr": lr}).fit(tiny) for lr in (1e300, 1e-6))
    assert big.params["lr_capped"] is True and small.params["lr_capped"] is False
