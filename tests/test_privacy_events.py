"""The declared events and the one accountant: what a fit's `Release` may declare, how the events compose against
dp_accounting, the calibrated target, and the refusals that keep a declaration from printing a false headline."""
import math

import dp_accounting as dpa
import numpy as np
import pytest

from dpmf_lit.core.privacy import PrivacyAccountant, PureDpEvent, Release, gaussian_epsilon
from dpmf_lit.model.cards import audit_settings
from dpmf_lit.model.mechanism import get_mechanism


@pytest.mark.parametrize("event", [PureDpEvent(-1.0), PureDpEvent(float("nan")), PureDpEvent(math.inf),
                                   dpa.GaussianDpEvent(0.0), dpa.LaplaceDpEvent(-2.0),
                                   dpa.SelfComposedDpEvent(PureDpEvent(1.0), -3),
                                   dpa.ComposedDpEvent([PureDpEvent(1.0), PureDpEvent(-1.0)]), dpa.NonPrivateDpEvent()])
def test_a_bad_event_is_refused_before_any_report(event):
    with pytest.raises(ValueError):
        PrivacyAccountant().record(event)


def test_a_pure_step_of_zero_epsilon_costs_nothing():
    "A step whose output does not depend on the data (e.g. every personalized weight 0) is 0-DP."
    assert PrivacyAccountant().record(PureDpEvent(0.0)).epsilon(0.0, "pure")[0] == 0.0


def test_a_release_cannot_set_its_own_epsilon():
    with pytest.raises(ValueError, match="accountant's"):
        Release((("g", dpa.GaussianDpEvent(0.5)),), "rdp", dict(delta=1e-5, epsilon=0.01, scope="s")).report()
    with pytest.raises(ValueError, match="accountant's"):
        Release(fields=dict(epsilon=0.01, delta=0.0, scope="s", coverage="end-to-end", unit="user")).report()


def test_a_release_without_events_has_no_guarantee():
    rep = Release(fields=dict(released=("V",), scope="no guarantee")).report()
    assert not rep.private and rep.epsilon is None


def test_rdp_composition_is_dp_accountings():
    z, n, d = 1.3, 50, 1e-5
    acc = PrivacyAccountant(unit="user").record(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), n))
    ref = dpa.rdp.RdpAccountant()   # the library's own orders and conversion
    ref.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), n))
    assert acc.epsilon(d, "rdp")[0] == pytest.approx(ref.get_epsilon(d), rel=1e-9)


def test_mixed_events_compose_and_zero_counts_are_empty():
    acc = (PrivacyAccountant().record(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 3))
           .record(dpa.LaplaceDpEvent(1 / 0.5)).record(PureDpEvent(0.25))
           .record(dpa.SelfComposedDpEvent(PureDpEvent(9.0), 0)))
    only = PrivacyAccountant().record(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 3)).record(
        dpa.LaplaceDpEvent(1 / 0.5)).record(PureDpEvent(0.25))
    assert acc.epsilon(1e-6, "rdp") == only.epsilon(1e-6, "rdp")       # a step run 0 times costs nothing
    assert acc.epsilon(1e-6, "pld")[0] <= acc.epsilon(1e-6, "rdp")[0] + 1e-6   # PLD is the tighter of the two here
    pure = PrivacyAccountant().record(PureDpEvent(0.25)).record(dpa.SelfComposedDpEvent(PureDpEvent(0.5), 4))
    assert pure.epsilon(0.0, "pure")[0] == pytest.approx(2.25)


def test_gdp_composes_gaussians_exactly_and_nothing_else():
    acc = PrivacyAccountant().record(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(4.0), 16))
    assert acc.epsilon(1e-5, "gdp")[0] == pytest.approx(gaussian_epsilon(1.0, 1e-5), rel=1e-12)   # μ = √16 / 4 = 1
    with pytest.raises(ValueError, match="Gaussian steps only"):
        acc.record(PureDpEvent(0.1)).epsilon(1e-5, "gdp")


def test_the_calibrated_target_is_reported_only_when_the_exact_composition_is_within_it():
    events = ((("sums", dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(4.0), 16)),))
    exact = gaussian_epsilon(1.0, 1e-5)
    ok = Release(events, "rdp", dict(delta=1e-5, target=exact * 1.01, scope="s", unit="user")).report()
    assert ok.epsilon == pytest.approx(exact * 1.01) and ok.delta == 1e-5
    with pytest.raises(RuntimeError, match="calibration failed"):
        Release(events, "rdp", dict(delta=1e-5, target=exact * 0.99, scope="s", unit="user")).report()


@pytest.mark.parametrize("name", sorted(n for n, s in audit_settings().items() if s.get("exact") == "objective"))
def test_every_exact_audit_has_its_mechanisms_log_ratio(name):
    assert callable(getattr(get_mechanism(name), "log_ratio", None)), name
