"""Privacy mutants (nbs/12a_privacy_meter, 12b_privacy_meter_others, 12c_privacy_mutants): the meter finds nothing wrong with the package as it is, and every declared
privacy bug, written into the package's own source, is caught by it."""
import numpy as np
import pytest
from dpmf_lit.model.mechanism import mechanisms
from dpmf_lit.studies.meter import METER, OBJECTIVE, meter_pairs, read_meter
from dpmf_lit.studies.meter_others import OTHERS, problems
from dpmf_lit.studies.mutants import MUTANTS, Mutant, mutated
from dpmf_lit.core.privacy import observe_releases
from dpmf_lit.data.synthetic import synthetic


def test_the_package_as_it_is_passes_the_meter():
    assert problems() == {name: [] for name in [*METER, *OBJECTIVE, *OTHERS]}
    assert problems(crashes=True) == {name: [] for name in [*METER, *OBJECTIVE, *OTHERS]}   # and no fit raised


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.mechanism}: {m.what}")
def test_every_privacy_mutant_is_killed(mutant):
    """The mutant applies (its text is still in the source) and the meter finds a problem under it; after it, none. A mutant
    declared equivalent must still apply, and leave the loader-built pairs (where a key-order bug shows) within the claim."""
    with mutated(mutant):
        if mutant.equivalent:
            from dpmf_lit.studies.meter_public import read_loader
            assert all(not read_loader(n, METER[n][0]).problems for n in ("dp-bias", "dp-bias-features", "dpals")), mutant.what
            return
        found = {k: v for k, v in problems(first=True).items() if v}
    assert found, f"mutant survived: {mutant.what} ({mutant.where})"


def test_a_mutant_is_undone_after_its_block():
    m = next(m for m in MUTANTS if m.what == "noise on the right-hand sides halved")   # one of the three that passed every test before
    before = read_meter("dpals", METER["dpals"][0]).measured_mu
    with mutated(m): assert read_meter("dpals", METER["dpals"][0]).measured_mu > 1.3 * before
    assert read_meter("dpals", METER["dpals"][0]).measured_mu == before


def test_a_mutant_whose_text_is_gone_fails_loudly():
    with pytest.raises(ValueError, match="update the mutant"):
        with mutated(Mutant("dpals", "x", "dpmf_lit.papers.dpals:noisy_statistics", "text that is not there", "")): pass


def test_the_mutants_cover_each_metered_mechanism():
    "At least the noise, a clip or trimming, and the sensitivity or composition of each mechanism with a Gaussian release."
    for name in ("dp-bias", "dpals", "dpals-adaptive", "dp-bias-features", "hua"):
        whats = " ".join(m.what for m in MUTANTS if m.mechanism == name)
        assert "halved" in whats and ("clip" in whats or "trimming" in whats) and ("sensitivity" in whats or "composition" in whats), name
    for name in ("dp-pmf", "pdp-pmf", "user-mean", "user-features", "sgld", "xin", "gauss", "hua-protocol"):
        assert any(m.mechanism == name for m in MUTANTS), name


def test_every_mechanism_with_a_guarantee_has_mutants():
    "Each registered mechanism whose audit finds a guarantee (or a paper's claim it could test) has declared mutants, except the Gaussian paper variant, which has no guarantee."
    from dpmf_lit.studies.audit import audit_status
    guaranteed = {n for n in mechanisms() if audit_status(n).startswith("audited")}
    assert guaranteed <= {m.mechanism for m in MUTANTS}, guaranteed - {m.mechanism for m in MUTANTS}


def test_every_mechanism_with_a_gaussian_release_is_metered():
    "A mechanism whose fit passes through gaussian_release must be in METER (so a new one cannot escape the meter)."
    r = synthetic(n_users=60, n_items=40, n_ratings=600, seed=0)
    for name, cls in mechanisms().items():
        seen = []
        kw = dict(getattr(cls, "test_params", {}))
        if "seed" in cls.parameter_names(): kw["seed"] = 0
        with observe_releases(lambda *a: seen.append(a[0]) or a[4]): cls(**kw).fit(r)    # every mechanism fits: none escapes
        if seen: assert name in METER, f"{name} makes Gaussian releases {sorted(set(seen))} but is not metered"


def test_the_meter_pairs_keep_the_others_in_place():
    for neighbouring in ("replace", "add_remove"):
        for _, D, D2 in meter_pairs(neighbouring, 3):
            k = min(len(D), len(D2)) - 6
            assert np.array_equal(D.user[:k], D2.user[:k]) and np.array_equal(D.rating[:k], D2.rating[:k])
