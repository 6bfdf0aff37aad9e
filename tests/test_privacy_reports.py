"""Privacy reports that mean what they say: every mechanism with a guarantee runs at a target ε for its unit and
reports that ε; a guarantee the proof does not cover prints no (ε, δ) headline; a conditional one leads with its
condition; units and targets are checked by name before any work."""
import json, math

import numpy as np
import pytest

from dpmf_lit.model.cards import targets, units
from dpmf_lit.model.mechanism import mechanisms
from dpmf_lit.model.testing import small_split
from test_cli import SMALL, dpmf

MECHANISMS = mechanisms()
# the configuration under which each mechanism has a guarantee to calibrate, and its unit: read from the cards (01d_cards)
TARGETS, UNITS = targets(), units()


@pytest.fixture(scope="module")
def split():
    return small_split()


def build(name, **kw):
    cls = MECHANISMS[name]
    return cls(**{**cls.test_params, "seed": 0, **kw})


def test_every_mechanism_with_an_epsilon_is_calibrated_here():
    "A new mechanism with an `epsilon` parameter must state its guaranteed configuration on its card (or the test names it)."
    with_eps = {n for n, c in MECHANISMS.items() if "epsilon" in c.parameter_names()}
    assert with_eps <= set(TARGETS), f"mechanisms with epsilon and no target test: {sorted(with_eps - set(TARGETS))}"


@pytest.mark.parametrize("name", sorted(set(TARGETS) & set(MECHANISMS)))
@pytest.mark.parametrize("epsilon", [0.3, 0.8])
def test_ask_for_epsilon_get_a_report_of_epsilon(name, epsilon, split):
    train, _ = split
    rep = build(name, epsilon=epsilon, **TARGETS[name]).fit(train).privacy
    assert rep.private and rep.coverage in ("end-to-end", "conditional"), rep.summary()
    assert rep.unit == UNITS[name] and rep.unit == MECHANISMS[name]().unit
    assert math.isclose(rep.epsilon, epsilon, rel_tol=1e-6), (name, rep.epsilon)


@pytest.mark.parametrize("name", sorted(set(TARGETS) & set(MECHANISMS)))
def test_units_and_targets_are_checked_by_name(name):
    other = "user" if UNITS[name] == "rating" else "rating"
    with pytest.raises(ValueError, match="unit='household' is not a privacy unit"): build(name, unit="household")
    with pytest.raises(ValueError, match=f"unit='{other}': this mechanism's guarantee is per {UNITS[name]} only"): build(name, unit=other)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="epsilon="): build(name, epsilon=bad, **TARGETS[name])


def test_gauss_paper_variant_prints_no_headline(split):
    train, _ = split
    rep = build("gauss").fit(train).privacy
    assert rep.coverage == "none" and rep.epsilon is None and rep.epsilon_claimed > 0
    assert rep.summary().startswith("no differential-privacy guarantee") and "-DP per" not in rep.summary()
    with pytest.raises(ValueError, match="only variant='both'"): build("gauss", epsilon=1.0)
    with pytest.raises(ValueError, match="give one of them"): build("gauss", epsilon=1.0, variant="both", step_epsilon=0.5)
    with pytest.raises(ValueError, match="needs step_epsilon >= 1"): build("gauss", epsilon=1e4, variant="both")


def test_gauss_target_is_the_toolkits_epsilon(split):
    "The calibrated run's ε is what dp_accounting's PLD gives for its 2J Gaussian releases."
    from dpmf_lit.core.privacy import classic_noise_multiplier, dp_accounting_pld_epsilon
    m = build("gauss", epsilon=0.8, variant="both", epochs=7)
    z = classic_noise_multiplier(m.step_epsilon, m.step_delta)
    assert math.isclose(dp_accounting_pld_epsilon(z, 14, m.delta), 0.8, rel_tol=2e-3)


def test_pdp_remove_reading_covers_a_value_change_only_and_zero_reading_is_conditional(split):
    "The remove reading has no guarantee for the paper's neighbour (a rating removed); what it prints is the value change, headlined with that condition (and audited)."
    train, _ = split
    model = build("pdp-pmf").fit(train)
    rem, zero = model.privacy, build("pdp-pmf", dropped="zero").fit(train).privacy
    assert rem.coverage == "conditional" and rem.summary().startswith("given U") and "value replaced only" in rem.condition
    assert math.isclose(rem.epsilon, model.params["t_value"] * 4 / 5)          # m (r_max - r_min) / Delta, Delta = r_max
    assert "does not hold under its own neighbour" in rem.method
    assert zero.coverage == "conditional" and zero.summary().startswith("given U")
    with pytest.raises(ValueError, match="needs dropped='zero'"): build("pdp-pmf", epsilon=0.5)
    with pytest.raises(ValueError, match="not both"): build("pdp-pmf", epsilon=0.5, dropped="zero", threshold=0.4)


def test_conditional_reports_lead_with_their_condition(split):
    train, _ = split
    for name, lead in (("hua", "given U"), ("dp-pmf", "given U"), ("sgld", "if V were an exact posterior sample")):
        rep = build(name).fit(train).privacy
        assert rep.coverage == "conditional" and rep.summary().startswith(lead), rep.summary()


def test_per_rating_reports_give_the_per_user_value_by_group_privacy(split):
    train, _ = split
    k = int(np.bincount(train.user).max())
    rep = build("hua", epsilon=0.5).fit(train).privacy
    assert rep.epsilon_user == pytest.approx(0.5 * k) and rep.delta_user == 0 and f"k = {k}" in rep.user_note
    m = build("gauss", variant="both", epsilon=0.8)
    g = m.fit(train).privacy   # Gaussian releases: the user's k ratings as one Gaussian of multiplier z/√(k(k+1)), not δ-blowing group privacy
    from dpmf_lit.core.privacy import classic_noise_multiplier, gaussian_epsilon_exact
    z = classic_noise_multiplier(m.step_epsilon, m.step_delta)
    assert g.delta_user == g.delta and g.epsilon_user == pytest.approx(gaussian_epsilon_exact(z / math.sqrt(k * (k + 1)), m.epochs, g.delta))
    assert g.epsilon < g.epsilon_user < math.inf and f"k = {k}" in g.user_note


def test_cli_prints_no_headline_for_gauss_and_the_condition_first_for_hua():
    g = dpmf("fit", "gauss", "--dataset", SMALL, "--set", "d=3", "--set", "epochs=3")
    assert g.returncode == 0, g.stderr
    assert "no differential-privacy guarantee" in g.stdout and "-DP per" not in g.stdout and "the paper's ε =" in g.stdout
    h = dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=3", "--json")
    rep = json.loads(h.stdout)["privacy"]
    assert rep["coverage"] == "conditional" and rep["summary"].startswith("given U") and rep["randomness"] == "secret"
    s = dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=3", "--set", "seed=5", "--json")
    rep = json.loads(s.stdout)["privacy"]
    assert rep["randomness"] == "public" and rep["seed"] == 5 and "not private against anyone who knows the seed" in rep["summary"]
    bad = dpmf("fit", "hua", "--dataset", SMALL, "--set", "unit=user")
    assert bad.returncode == 2 and bad.stderr.startswith("dpmf: error: unit='user'"), bad.stderr


def test_gauss_both_is_conditional_when_the_data_choose_the_iterations_or_tau_is_below_the_range(split):
    "A tol rule reads the raw training RMSE, a τ below r_max - r_min does not bound a value change, and an overflow error depends on the data: no end-to-end headline."
    train, _ = split
    tol = build("gauss", variant="both", epochs=50, tol=1e9).fit(train).privacy
    assert tol.coverage == "conditional" and tol.summary().startswith("given the 2 iterations run, which the tol rule chose")
    small = build("gauss", variant="both", rating_range=0.5).fit(train).privacy
    assert small.coverage == "conditional" and small.summary().startswith("if no rating's value moves by more than τ = 0.5")
    over = build("gauss", variant="both").fit(train).privacy   # clip='gradient': whether the fit overflows depends on the data
    assert over.coverage == "conditional" and over.summary().startswith("if the fit does not raise")
    assert build("gauss", variant="both", clip="profiles").fit(train).privacy.coverage == "end-to-end"


def test_a_gradient_phase_started_from_step_1_is_in_the_condition(split):
    "DP-PMF/PDP-PMF with solver='gd' from step 1's non-private V: the iterate depends on V0, so the condition names it."
    train, _ = split
    gd = build("dp-pmf", solver="gd", v_init="pmf").fit(train).privacy
    assert gd.summary().startswith("given U and the start V0 of the gradient phase")
    assert build("dp-pmf", solver="gd", v_init="zero").fit(train).privacy.summary().startswith("given U, trained")
