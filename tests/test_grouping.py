"""The O(n) grouping of nbs/00h_grouping.ipynb and the kernels built on it: each equal, to the bit, to the comparison-sort
or numpy reference it replaced (sorted and unsorted data, one and two threads), and the per-user trimming's law tested
with power, and the keys hashed from (root, user, item): one stream per user, so that for a fixed seed one user's ratings
change no other user's kept subset."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from dpmf_lit.papers.baselines import item_totals, ridge_offsets, user_offsets
from dpmf_lit.data import Ratings
from dpmf_lit.papers.dpals import _eigh, by_item, item_codes, item_statistics
from dpmf_lit.core.grouping import _keep_by_keys, group_by, keep_mask, keep_per_user, pair_keys, subset_frequencies, take
from dpmf_lit.core.kernels import numba_threads, to_csr
from dpmf_lit.core.stats import ACCEPT, REJECT


def _lexsort_keep(user, tau, keys, prio=None):
    "The former trimming: a stable lexicographic sort by (user, priority, key), the first tau of each user."
    order = np.lexsort((keys, user) if prio is None else (keys, prio, user))
    u = user[order]
    return np.sort(order[np.arange(len(u)) - np.searchsorted(u, u, side="left") < tau])


def _pairs(user, item, mask, but=None) -> set:
    "The kept (user, item) pairs, but those of user `but`."
    return {(int(u), int(j)) for u, j in zip(user[mask], item[mask]) if u != but}


codes = st.lists(st.integers(0, 9), min_size=0, max_size=300)


@settings(max_examples=60, deadline=None)
@given(codes, st.booleans(), st.sampled_from([1, 2]))
def test_group_by_is_the_stable_argsort(keys, presorted, threads):
    key = np.array(sorted(keys) if presorted else keys, np.int32)
    with numba_threads(threads): ptr, order = group_by(key, 10)
    assert np.array_equal(ptr, np.r_[0, np.cumsum(np.bincount(key, minlength=10))])
    mask = np.arange(len(key)) % 3 != 0
    with numba_threads(threads): mptr, morder = group_by(key, 10, mask=mask)
    assert np.array_equal(morder, np.flatnonzero(mask)[np.argsort(key[mask], kind="stable")])
    assert np.array_equal(mptr, np.r_[0, np.cumsum(np.bincount(key[mask], minlength=10))])
    got = np.arange(len(key)) if order is None else order
    assert np.array_equal(got, np.argsort(key, kind="stable"))
    assert (order is None) == bool(np.all(np.diff(key) >= 0))


@settings(max_examples=40, deadline=None)
@given(codes, st.booleans(), st.integers(0, 2**32 - 1))
def test_to_csr_is_the_former_sort(rows, presorted, seed):
    row = np.array(sorted(rows) if presorted else rows, np.int32)
    g = np.random.default_rng(seed)
    col, val = g.integers(0, 50, len(row)).astype(np.int32), g.random(len(row)).astype(np.float32)
    o = np.argsort(row, kind="stable")
    ptr, c, v = to_csr(row, col, val, 10)
    assert np.array_equal(ptr, np.r_[0, np.cumsum(np.bincount(row, minlength=10))])
    assert np.array_equal(c, col[o]) and np.array_equal(v, val[o]) and c.dtype == np.int32 and v.dtype == np.float32


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=200), st.integers(1, 6), st.booleans(), st.booleans(),
       st.integers(1, 50), st.integers(0, 2**32 - 1), st.sampled_from([1, 2]))
def test_trimming_is_the_former_lexsort(users, tau, presorted, ties, block, seed, threads):
    user = np.array(sorted(users) if presorted else users, np.int32)
    g = np.random.default_rng(seed)
    keys = g.integers(0, 3, len(user)) / 4.0 if ties else g.random(len(user))    # ties: broken by the earlier rating
    item, prio = g.integers(0, 5, len(user)).astype(np.int32), g.integers(0, 2, 5).astype(np.float64)
    with numba_threads(threads):
        assert np.array_equal(np.flatnonzero(_keep_by_keys(user, tau, keys, 10, block=block)), _lexsort_keep(user, tau, keys))
        assert np.array_equal(np.flatnonzero(_keep_by_keys(user, tau, keys, 10, item=item, priority=prio, block=block)),
                              _lexsort_keep(user, tau, keys, prio[item]))


def test_trimming_keys_are_the_hashed_pair_keys():
    g = np.random.default_rng(0)
    user, item = np.sort(g.integers(0, 300, 20_000)).astype(np.int32), g.integers(0, 5000, 20_000).astype(np.int32)
    for block in (1 << 22, 1000, 7):          # blocks of whole users hash the same keys
        got = keep_per_user(user, 20, np.random.default_rng(3), item=item, block=block)
        assert np.array_equal(got, _lexsort_keep(user, 20, pair_keys(np.random.default_rng(3), user, item)))
    u, i = user[::-1].copy(), item[::-1].copy()
    assert np.array_equal(keep_per_user(u, 20, np.random.default_rng(3), item=i),
                          _lexsort_keep(u, 20, pair_keys(np.random.default_rng(3), u, i)))


def test_trimming_empty_and_small_users():
    assert keep_per_user(np.zeros(0, np.int32), 3, np.random.default_rng(0), item=np.zeros(0, np.int32)).size == 0
    user = np.array([4, 4, 0, 4], np.int32)                 # users 1-3 have no rating; user 0 one
    item = np.array([0, 1, 0, 2], np.int32)
    assert keep_mask(user, 2, np.random.default_rng(0), 6, item=item).sum() == 3
    with pytest.raises(ValueError, match="max_ratings"): keep_per_user(user, 0, np.random.default_rng(0), item=item)


def test_keep_mask_needs_the_items_and_a_generator():
    "No rating-order stream to fall back on: without the item codes, or with a stand-in generator, it refuses."
    user, item = np.array([0, 0, 1], np.int32), np.array([3, 1, 3], np.int32)
    with pytest.raises(TypeError, match="item"): keep_mask(user, 1, np.random.default_rng(0))
    with pytest.raises(TypeError, match="item"): keep_mask(user, 1, np.random.default_rng(0), item=None)
    with pytest.raises(TypeError, match="Generator"): keep_mask(user, 1, np.random.RandomState(0), item=item)
    with pytest.raises(ValueError, match="shape"): keep_mask(user, 1, np.random.default_rng(0), item=item[:2])
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*32\)"): keep_mask(user, 1, np.random.default_rng(0), item=-item)
    with pytest.raises(ValueError, match="integer"): keep_mask(user, 1, np.random.default_rng(0), item=item + 0.5)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(0, 40), st.booleans(), st.sampled_from([1 << 22, 7]),
       st.sampled_from([1, 2]))
def test_one_users_ratings_leave_every_other_users_kept_pairs(seed, tau, n0, tail, block, threads):
    """For a fixed seed: user 0 (the first, before everyone's rows) gains or loses ratings and the rows are shuffled;
    every other user keeps the same (user, item) pairs — with uniform keys and with a priority (the tail)."""
    g = np.random.default_rng(seed)
    n_users, n_items = 12, 40
    pairs = np.sort(g.choice(n_users * n_items, 250, replace=False))
    user, item = (pairs // n_items).astype(np.int32), (pairs % n_items).astype(np.int32)
    prio = g.integers(0, 3, n_items).astype(np.float64) if tail else None
    mine = g.choice(n_items, n0, replace=False).astype(np.int32)                # user 0's new ratings
    u2, i2 = np.r_[np.zeros(n0, np.int32), user[user != 0]], np.r_[mine, item[user != 0]]
    p = g.permutation(len(u2))
    with numba_threads(threads):
        a = keep_mask(user, tau, np.random.default_rng(99), n_users, item=item, priority=prio, block=block)
        b = keep_mask(u2[p], tau, np.random.default_rng(99), n_users, item=i2[p], priority=prio, block=block)
    assert _pairs(user, item, a, but=0) == _pairs(u2[p], i2[p], b, but=0)
    assert np.bincount(u2[p][b], minlength=n_users)[0] == min(n0, tau)


def test_the_same_seed_keeps_the_same_pairs_and_another_seed_others():
    "Same seed: the same kept pairs, in any row order, block size and thread count; other seeds: other pairs."
    r = _ratings(6)
    shuffled = r.take(np.random.default_rng(1).permutation(len(r)))
    def kept(data, seed, block=1 << 22, threads=2):
        with numba_threads(threads):
            return _pairs(data.user, data.item, keep_mask(data.user, 5, np.random.default_rng(seed), data.n_users, item=data.item, block=block))
    base = kept(r, 7)
    assert all(kept(d, 7, b, t) == base for d in (r, shuffled) for b in (1 << 22, 13) for t in (1, 2))
    assert len(base) == int(np.minimum(np.bincount(r.user), 5).sum()) and len(base) < len(r)
    assert all(kept(r, s) != base for s in range(8, 14))


def test_hashed_keys_make_every_subset_equally_likely_across_users():
    """One root: 20,000 users holding the same 6 items (and users with other codes, items up to 2**32 - 1) each keep
    3 of them; every one of the 20 subsets is equally likely (χ²), and the selection is the one of `pair_keys`."""
    from itertools import combinations
    index = np.zeros(64, np.int64)
    for k, s in enumerate(combinations(range(6), 3)): index[sum(1 << q for q in s)] = k
    for user0, codes, seed in ((0, [0, 1, 2, 3, 4, 5], 1), (10**6, [7, 2**32 - 1, 99, 100, 3, 2**31], 2)):
        user = np.repeat(np.arange(user0, user0 + 20_000), 6).astype(np.int32)
        item = np.tile(np.array(codes, np.int64), 20_000)
        mask = keep_mask(user, 3, np.random.default_rng(seed), item=item)
        assert np.array_equal(np.flatnonzero(mask), _lexsort_keep(user, 3, pair_keys(np.random.default_rng(seed), user, item)))
        f = np.bincount(index[mask.reshape(-1, 6) @ (1 << np.arange(6))], minlength=20)
        assert stats.chisquare(f).pvalue > ACCEPT, f


def test_each_subset_is_equally_likely_and_a_biased_sampler_is_caught():
    for n, tau, seed in ((6, 3, 1), (5, 2, 2)):
        f = subset_frequencies(n, tau, draws=20_000, seed=seed)
        assert stats.chisquare(f).pvalue > ACCEPT, f
        assert stats.chisquare(subset_frequencies(n, tau, draws=20_000, seed=seed, bias=0.1)).pvalue < REJECT


def test_two_users_trimmed_independently():
    "The subsets of two users of the same items are independent (hashed with the user): a chi-square of the joint table."
    user, item = np.repeat(np.arange(2), 4).astype(np.int32), np.tile(np.arange(4), 2).astype(np.int32)
    joint = np.zeros((4, 4), np.int64)
    for s in range(8000):
        k = keep_per_user(user, 1, np.random.default_rng([9, s]), item=item)
        joint[k[0], k[1] - 4] += 1
    assert stats.chi2_contingency(joint).pvalue > ACCEPT


def _ratings(seed, n_users=40, n_items=30, n=600, presorted=True):
    g = np.random.default_rng(seed)
    pairs = g.choice(n_users * n_items, n, replace=False)
    if presorted: pairs = np.sort(pairs)
    return Ratings((pairs // n_items).astype(np.int32), (pairs % n_items).astype(np.int32),
                   g.integers(1, 6, n).astype(np.float32), n_users, n_items, 1.0, 5.0)


@pytest.mark.parametrize("presorted", [True, False])
def test_item_totals_and_user_offsets_are_the_numpy_passes(presorted):
    r = _ratings(0, presorted=presorted)
    kept = keep_mask(r.user, 5, np.random.default_rng(1), r.n_users, item=r.item)
    sub = r.take(np.flatnonzero(kept))
    x = np.clip(sub.rating.astype(np.float64) - 2.7, -2, 2)
    S, C = item_totals(r, 2.7, kept)
    assert np.array_equal(S, np.bincount(sub.item, x, r.n_items)) and np.array_equal(C, np.bincount(sub.item, minlength=r.n_items))
    c = np.random.default_rng(2).normal(size=r.n_items)
    assert np.array_equal(user_offsets(r, 3.0, c, 2.0), ridge_offsets(r.user, r.rating - 3.0 - c[r.item], r.n_users, 2.0))


@pytest.mark.parametrize("presorted", [True, False])
def test_by_item_is_the_stable_argsort(presorted):
    r = _ratings(3, presorted=presorted)
    mask = keep_mask(r.user, 6, np.random.default_rng(0), r.n_users, item=r.item)
    kept = np.flatnonzero(mask)
    ptr, u, x = by_item(r, mask)
    o = np.argsort(r.item[kept], kind="stable")
    assert np.array_equal(u, r.user[kept][o]) and np.array_equal(item_codes(ptr), r.item[kept][o])
    assert np.array_equal(x, r.rating[kept][o]) and ptr[-1] == len(kept)
    # the targets formed in the statistics kernel are the clipped residuals formed before it: A_j to the bit, β_j to
    # float64 rounding (the kernel compiles with fastmath, which may subtract the offsets in another order)
    g = np.random.default_rng(1)
    U, c, b, dots = g.normal(size=(r.n_users, 4)), g.normal(size=r.n_items), g.normal(size=r.n_users).astype(np.float32), g.normal(size=len(u))
    xx = np.clip(x.astype(np.float64) - 3.0 - c[item_codes(ptr)] - b[u] - dots, -1.5, 1.5)
    (A1, b1), (A2, b2) = item_statistics(ptr, u, x, U, 3.0, c, b, dots, 1.5), item_statistics(ptr, u, xx, U)
    assert np.array_equal(A1, A2)
    np.testing.assert_allclose(b1, b2, rtol=1e-12, atol=1e-12)
    assert not np.allclose(b1, item_statistics(ptr, u, np.clip(xx, -1.4, 1.4), U)[1], rtol=1e-12, atol=1e-12)   # a tighter clip is seen


def test_threaded_eigh_is_numpys():
    g = np.random.default_rng(0)
    A = g.normal(size=(101, 5, 5)); A = A + A.transpose(0, 2, 1)
    with numba_threads(2): w, Q = _eigh(A)
    w0, Q0 = np.linalg.eigh(A)
    assert np.array_equal(w, w0) and np.array_equal(Q, Q0)


@pytest.mark.parametrize("presorted", [True, False])
def test_validation_finds_the_same_repeated_pair_and_bad_rating(presorted):
    r = _ratings(4, presorted=presorted)
    r.validate()
    dup = Ratings(np.r_[r.user, r.user[7]].astype(np.int32), np.r_[r.item, r.item[7]].astype(np.int32),
                  np.r_[r.rating, 3.0].astype(np.float32), r.n_users, r.n_items, 1.0, 5.0)
    with pytest.raises(ValueError, match=r"duplicate \(user, item\) pair .* at index 7 and index 600; 1 duplicate"): dup.validate()
    for bad, msg in ((np.nan, "rating is NaN at index 5"), (9.0, "rating=9 at index 5")):
        rating = r.rating.copy(); rating[5] = bad
        with pytest.raises(ValueError, match=msg):
            Ratings(r.user, r.item, rating, r.n_users, r.n_items, 1.0, 5.0).validate()


def test_take_gathers():
    a = np.arange(10, dtype=np.int32)
    assert np.array_equal(take(a, np.array([9, 0, 9])), [9, 0, 9]) and take(a, np.array([1]), np.float64).dtype == np.float64


def test_masks_and_keys_are_checked():
    r = _ratings(5)
    idx = keep_per_user(r.user, 2, np.random.default_rng(0), r.n_users, item=r.item)     # indices, not a mask
    with pytest.raises(ValueError, match="kept: a boolean mask"): item_totals(r, 3.0, idx)
    with pytest.raises(ValueError, match="mask: a boolean mask"): group_by(r.item, r.n_items, mask=np.arange(len(r)))
    with pytest.raises(ValueError, match="integer type"): group_by(np.array([0.0, 1.5]), 3)


def test_a_bound_float32_cannot_hold_is_checked_as_numpy_checks_it():
    bad = Ratings(np.array([0, 1], np.int32), np.zeros(2, np.int32), np.float32([1.0, 5.0]), 2, 1, 1.0, np.float64(4.99999999))
    with pytest.raises(ValueError, match="outside the declared range"): bad.validate()
