"""The ranking task (nbs/00j_ranking, 00k_implicit, 01f_fold_in, 10a_dpals_implicit, 11c_compare_ranking): the ranking
mechanisms pass the meter through their own code path, and every privacy bug written into their source is caught by it."""
import numpy as np
import pytest
from dpmf_lit.data.implicit import binarize, new_user_split
from dpmf_lit.data.synthetic import synthetic
from dpmf_lit.studies.mutants import Mutant, mutated
from dpmf_lit.studies.ranking import RANKING_METER, compare_ranking, meter_ranking, ranking_record

I, F = "dpmf_lit.papers.dpals_implicit", "dpmf_lit.model.fold_in"
RANKING_MUTANTS = (
    Mutant("dpals-implicit", "noise on the Gram matrices halved", f"{I}:release_statistics", "gaussian_release(A, sigma_A,", "gaussian_release(A, sigma_A / 2,"),
    Mutant("dpals-implicit", "noise on the right-hand sides halved", f"{I}:release_statistics", "gaussian_release(beta, sigma_beta,", "gaussian_release(beta, sigma_beta / 2,"),
    Mutant("dpals-implicit", "noise on the global Gram halved", f"{I}:release_statistics", "gaussian_release(G, sigma_A,", "gaussian_release(G, sigma_A / 2,"),
    Mutant("dpals-implicit", "the global Gram released without noise", f"{I}:release_statistics", "gaussian_release(G, sigma_A, rng, \"global Gram G\", symmetric=True)", "G"),
    Mutant("dpals-implicit", "user rows not clipped", f"{I}:ImplicitDPALS._fit", "clip_rows(U, self.max_norm)", "U"),
    Mutant("dpals-implicit", "trimming to τ positives a user ignored", f"{I}:ImplicitDPALS._fit",
           "keep_mask(train.user, self.max_ratings, self.rng(3), train.n_users, item=train.item)", "np.ones(len(train), np.bool_)"),
    Mutant("dpals-implicit", "add/remove sensitivity without the global Gram, √(2τ)", f"{I}:implicit_sensitivity", "2 * tau + 1 if add", "2 * tau if add"),
    Mutant("dpals-implicit", "rounds not composed: each calibrated as if it were the only release", f"{I}:ImplicitDPALS._fit",
           "round_multiplier(self.epsilon, self.delta, self.epochs)", "round_multiplier(self.epsilon, self.delta, 1)"),
    Mutant("dpals-implicit", "the noise seed fixed (the noise is public)", f"{I}:ImplicitDPALS._fit", "self.rng(5)", "np.random.default_rng(0)"),
    Mutant("dp-popularity", "noise on the counts halved", f"{I}:DPPopularity._fit", "z * popularity_sensitivity", "z / 2 * popularity_sensitivity"),
    Mutant("dp-popularity", "trimming to τ positives a user ignored", f"{I}:DPPopularity._fit",
           "keep_mask(train.user, self.max_ratings, self.rng(3), train.n_users, item=train.item)", "np.ones(len(train), np.bool_)"),
    Mutant("dp-popularity", "add/remove sensitivity taken as √(τ/2)", f"{I}:popularity_sensitivity", "math.sqrt(tau if", "math.sqrt(tau / 2 if"),
    Mutant("dp-popularity", "the noise seed fixed (the noise is public)", f"{I}:DPPopularity._fit", "self.rng(5)", "np.random.default_rng(0)"),
)


def _problems(name):
    return [p for params in RANKING_METER[name] for p in meter_ranking(name, params, seeds=(0, 1)).problems]


@pytest.mark.parametrize("name", sorted(RANKING_METER))
def test_the_ranking_mechanisms_pass_the_meter(name):
    assert _problems(name) == []


@pytest.mark.parametrize("mutant", RANKING_MUTANTS, ids=lambda m: f"{m.mechanism}: {m.what}")
def test_every_ranking_mutant_is_killed(mutant):
    with mutated(mutant): found = _problems(mutant.mechanism)
    assert found, f"mutant survived: {mutant.what} ({mutant.where})"
    assert _problems(mutant.mechanism) == []       # undone after its block


def test_each_mechanism_has_noise_clip_and_accounting_mutants():
    for name in RANKING_METER:
        whats = " ".join(m.what for m in RANKING_MUTANTS if m.mechanism == name)
        assert "halved" in whats and "trimming" in whats and "seed" in whats and "sensitivity" in whats, name


def test_the_comparison_is_deterministic_in_its_seeds():
    r = synthetic(n_users=300, n_items=80, n_ratings=6000, seed=1)
    a = ranking_record(compare_ranking(r, epsilons=(5.0,), seeds=(0,), n_heldout=30, progress=False))
    b = ranking_record(compare_ranking(r, epsilons=(5.0,), seeds=(0,), n_heldout=30, progress=False))
    strip = lambda rec: [{k: v for k, v in row.items() if k != "seconds"} for row in rec["rows"]]
    assert strip(a) == strip(b) and {row["kind"] for row in a["rows"]} == {"floor", "mechanism", "reference"}


def test_new_users_are_not_trained_on():
    s = new_user_split(binarize(synthetic(n_users=200, n_items=50, n_ratings=4000, seed=2)), n_heldout=20, seed=0)
    held = set(s.test_history.user) | set(s.validation_history.user)
    assert not held & set(s.train.user)
