"""Fast ridge solves (nbs/01g_als): the blocked Cholesky path is `als_sweep`'s solve to float32 rounding for any row
length (across the float32 blocks and the four-rating unrolling), conjugate gradients never raise a row's objective
and reach the exact solve, and bad arguments are refused by name."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from dpmf_lit.core.kernels import als_sweep, to_csr
from dpmf_lit.model.als import BLOCK, ridge_sweep, solve_where_pd, sweep_speed
from dpmf_lit.data.synthetic import synthetic


def _problem(seed, n_rows, n_cols, n, d, long_row=0):
    "A random row-major CSR problem; row 0 gets `long_row` extra ratings (to cross the float32 blocks)."
    rng = np.random.default_rng(seed)
    row = np.r_[rng.integers(0, n_rows, n), np.zeros(long_row, np.int64)]
    col = np.r_[rng.integers(0, n_cols, n), rng.integers(0, n_cols, long_row)]
    val = rng.uniform(1, 5, len(row)).astype(np.float32)
    Y = (0.5 * rng.standard_normal((n_cols, d))).astype(np.float32)
    by = (0.2 * rng.standard_normal(n_cols)).astype(np.float32)
    X = (0.5 * rng.standard_normal((n_rows, d))).astype(np.float32)
    return to_csr(row, col, val, n_rows), X, Y, np.zeros(n_rows, np.float32), by


def _objective(csr, X, Y, bx, by, mu, reg, reg_bias, use_bias, weighted):
    "Σ over rows of ½ Σ_j (t_j − g_jᵀz)² + ½ zᵀΛz in float64."
    indptr, idx, val = csr
    total = 0.0
    for x in range(len(indptr) - 1):
        k = slice(indptr[x], indptr[x + 1]); n = indptr[x + 1] - indptr[x]
        if n == 0: continue
        w = n if weighted else 1.0
        e = val[k].astype(np.float64) - mu - Y[idx[k]].astype(np.float64) @ X[x].astype(np.float64)
        if use_bias: e -= by[idx[k]] + bx[x]
        total += 0.5 * e @ e + 0.5 * reg * w * float(X[x].astype(np.float64) @ X[x]) + (0.5 * reg_bias * w * float(bx[x]) ** 2 if use_bias else 0.0)
    return total


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12), st.booleans(), st.booleans(), st.integers(0, 3 * BLOCK + 3))
def test_cholesky_path_is_als_sweep(seed, d, use_bias, weighted, long_row):
    csr, X, Y, bx, by = _problem(seed, 20, 15, 120, d, long_row)
    X1, X2, b1, b2 = X.copy(), X.copy(), bx.copy(), bx.copy()
    als_sweep(*csr, X1, Y, b1, by, np.float32(3.0), 0.7, 1.5, use_bias, weighted)
    ridge_sweep(*csr, X2, Y, b2, by, 3.0, 0.7, 1.5, use_bias, weighted)
    scale = max(1.0, np.abs(X1).max())
    np.testing.assert_allclose(X2, X1, atol=2e-4 * scale)
    np.testing.assert_allclose(b2, b1, atol=2e-4 * max(1.0, np.abs(b1).max()))
    empty = np.diff(csr[0]) == 0
    assert np.all(X2[empty] == 0) and np.all(b2[empty] == 0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 10), st.booleans(), st.booleans())
def test_cg_descends_and_reaches_the_solve(seed, d, use_bias, weighted):
    csr, X, Y, bx, by = _problem(seed, 15, 12, 150, d)
    args = (3.0, 0.7, 1.5, use_bias, weighted)
    f = [_objective(csr, X, Y, bx, by, *args)]
    for steps in (1, 2, 3, 5):
        X1, b1 = X.copy(), bx.copy()
        ridge_sweep(*csr, X1, Y, b1, by, *args, solver="cg", steps=steps)
        f.append(_objective(csr, X1, Y, b1, by, *args))
    assert all(b <= a * (1 + 1e-5) + 1e-6 for a, b in zip(f, f[1:]))
    Xe, be = X.copy(), bx.copy(); ridge_sweep(*csr, Xe, Y, be, by, *args)
    Xc, bc = X.copy(), bx.copy(); ridge_sweep(*csr, Xc, Y, bc, by, *args, solver="cg", steps=3 * (d + 1))
    np.testing.assert_allclose(Xc, Xe, atol=1e-3 * max(1.0, np.abs(Xe).max()))


def test_three_cg_steps_are_not_the_solve():
    "The check above has power: from a poor start three steps leave the rows measurably short of the exact solve."
    csr, X, Y, bx, by = _problem(1, 15, 12, 300, 10)
    Xe, be = X.copy(), bx.copy(); ridge_sweep(*csr, Xe, Y, be, by, 3.0, 0.1, 0.1)
    Xc, bc = X.copy(), bx.copy(); ridge_sweep(*csr, Xc, Y, bc, by, 3.0, 0.1, 0.1, solver="cg", steps=3)
    assert np.abs(Xc - Xe).max() > 1e-2


def test_sweep_speed_reports_equal_fits_for_the_exact_path():
    r = synthetic(300, 80, 4000, seed=2)
    s = sweep_speed(r, 4, pairs=1, sweeps=2)
    assert abs(s["als_sweep_rmse"] - s["ridge_sweep_rmse"]) < 1e-4 and s["wall_ratio"] > 0 and s["steps"] is None
    c = sweep_speed(r, 4, solver="cg", pairs=1, sweeps=2)
    assert c["steps"] == 3 and c["ridge_sweep_rmse"] >= c["als_sweep_rmse"] - 1e-4


@pytest.mark.parametrize("kw, word", [(dict(solver="lu"), "solver"), (dict(solver="cg", steps=0), "steps")])
def test_bad_arguments_are_refused_by_name(kw, word):
    csr, X, Y, bx, by = _problem(0, 5, 5, 20, 3)
    with pytest.raises(ValueError, match=word): ridge_sweep(*csr, X, Y, bx, by, 3.0, 1.0, 1.0, **kw)


def test_float64_factors_are_refused():
    csr, X, Y, bx, by = _problem(0, 5, 5, 20, 3)
    with pytest.raises(TypeError, match="X must be a 2-d float32"): ridge_sweep(*csr, X.astype(np.float64), Y, bx, by, 3.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="columns"): ridge_sweep(*csr, X, Y[:, :2].copy(), bx, by, 3.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="sweeps"): sweep_speed(synthetic(50, 20, 300, seed=0), 2, sweeps=0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 9), st.booleans(), st.booleans(), st.sampled_from([np.inf, 0.7]))
def test_blocked_statistics_are_normal_equations(seed, d, offsets, weighted, clip):
    "Every option of `normal_equations` (offsets, per-rating dots, clip, weights), items with 0 to 13 raters: the same sums."
    from dpmf_lit.model.als import blocked_normal_equations
    from dpmf_lit.model.linalg import normal_equations
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 14, 9); ptr = np.r_[0, np.cumsum(counts)].astype(np.int64); n = int(ptr[-1])
    users = rng.integers(0, 11, n).astype(np.int32); vals = rng.uniform(1, 5, n).astype(np.float32)
    U = rng.standard_normal((11, d))
    kw = dict(m0=3.0, c_item=rng.normal(size=9), b_user=rng.normal(size=11), dots=rng.normal(size=n)) if offsets else {}
    if weighted: kw["weights"] = rng.uniform(0, 2, n)
    out = [(np.empty((9, d, d)), np.empty((9, d))) for _ in range(2)]
    normal_equations(ptr, users, vals, U, 0.3, *out[0], clip=clip, **kw)
    blocked_normal_equations(ptr, users, vals, U, 0.3, *out[1], clip=clip, **kw)
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d", [1, 3, 16, 19, 33])
def test_cholesky_sweep_matches_als_sweep_at_every_width(d):
    "The padded vector width (d → a multiple of 16) and the triangle above SQUARE give als_sweep's rows, empty rows 0."
    r = synthetic(200, 60, 3000, seed=d)
    csr = to_csr(r.user, r.item, r.rating, r.n_users + 3)          # three users with no ratings
    g = np.random.default_rng(d)
    V, c = (0.3 * g.standard_normal((r.n_items, d))).astype(np.float32), (0.1 * g.standard_normal(r.n_items)).astype(np.float32)
    U1, U2 = np.ones((r.n_users + 3, d), np.float32), np.ones((r.n_users + 3, d), np.float32)
    b1, b2 = np.ones(r.n_users + 3, np.float32), np.ones(r.n_users + 3, np.float32)
    als_sweep(*csr, U1, V, b1, c, np.float32(3.5), 0.5, 2.0, True, False)
    ridge_sweep(*csr, U2, V, b2, c, 3.5, 0.5, 2.0)
    assert np.abs(U1 - U2).max() < 1e-4 * max(1.0, np.abs(U1).max()) and np.abs(b1 - b2).max() < 1e-4
    assert not U2[-3:].any() and not b2[-3:].any()


def test_singular_rows_are_nan_not_garbage():
    "With no ridge and fewer ratings than unknowns the system is singular: the row says so (NaN) instead of a number."
    r = synthetic(50, 40, 400, seed=1)
    csr = to_csr(r.user, r.item, r.rating, r.n_users)
    V = np.random.default_rng(0).standard_normal((r.n_items, 12)).astype(np.float32)
    U, b = np.zeros((r.n_users, 12), np.float32), np.zeros(r.n_users, np.float32)
    ridge_sweep(*csr, U, V, b, np.zeros(r.n_items, np.float32), 3.0, 0.0, 0.0)
    few = np.diff(csr[0]) < 13
    assert few.any() and np.isnan(U[few]).all() and np.isfinite(U[~few]).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(1, 70), st.floats(0.1, 20.0), st.integers(0, 2**31 - 1))
def test_solve_items_is_the_projected_solve(k, m, noise, seed):
    "DPALS's item solve (Cholesky where the released matrix is PD, eigh elsewhere) equals the eigendecomposition's solve for every item."
    from dpmf_lit.papers.dpals import solve_items
    g = np.random.default_rng(seed)
    X = g.standard_normal((m, 3 * k, k)); A = np.einsum("mqa,mqe->mae", X, X) + g.normal(0, noise, (m, k, k))
    A = (A + A.transpose(0, 2, 1)) / 2; beta = g.standard_normal((m, k)); lam = g.uniform(0.5, 3.0, m)
    w, Q = np.linalg.eigh(A)
    want = np.einsum("mab,mb->ma", Q, np.einsum("mba,mb->ma", Q, beta) / (np.maximum(w, 0) + lam[:, None]))
    np.testing.assert_allclose(solve_items(A, beta, lam), want, rtol=1e-8, atol=1e-8)
    V, pd = solve_where_pd(A, beta, lam)
    clear = np.abs(w.min(1)) > 1e-6 * np.abs(w).max(1)                 # away from the boundary, the PD test is exact
    assert (pd[clear] == (w.min(1) > 0)[clear]).all()


def test_solve_where_pd_refuses_bad_shapes():
    with pytest.raises(ValueError, match="beta"): solve_where_pd(np.zeros((3, 2, 2)), np.zeros((3, 3)), 1.0)
