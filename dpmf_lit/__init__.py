"""A literate, reproducible repository for differentially private matrix factorization

Modules:

- `dpmf_lit.batch.outputs`: The paper notebooks are stored with the outputs their code makes — every quote, table and check visible on GitHub and on the site — by one command, deterministically, and stamped so that a test says when they are stale.
- `dpmf_lit.batch.reproduce`: One command regenerates every figure: a manifest of parameterized experiment notebooks, executed with papermill, atomically, skipping what is up to date, locally or on Dask.
- `dpmf_lit.batch.site`: Process the notebooks for Quarto wherever the clone lives, check that every page, link and figure resolves, build an offline HTML preview with typeset math, and generate the README and the package's list of modules.
- `dpmf_lit.cli.commands`: `dpmf compare` and `dpmf audit`: run the comparison's batch entry or an empirical privacy audit and print the result
- `dpmf_lit.cli.main`: `dpmf`: fetch and list data, fit a mechanism, benchmark the kernels, reproduce every figure.
- `dpmf_lit.cli.warmup`: `dpmf warmup`: compile the numba kernels a first `dpmf fit` needs — MovieLens 100K's loaders, `dp-bias` first, then every mechanism — into numba's cache on disk, with a progress line, so that the first real fit loads them instead of compiling
- `dpmf_lit.core.checks`: One set of validators for every public function and mechanism: a bad argument gets a `ValueError` that names the argument and its value, before any work starts.
- `dpmf_lit.core.grouping`: A counting sort that groups the ratings by user or by item, and the one per-user trimming every private mechanism shares: at most τ ratings of each user, a uniformly random subset or the τ of lowest priority, in one pass.
- `dpmf_lit.core.kernels`: The numba kernels that minimise the PMF objective of `dpmf_lit.model.mf`: serial and block-parallel SGD with software prefetch, full-batch gradient descent, alternating least squares and prediction, each under its formula and checked against a plain numpy reference.
- `dpmf_lit.core.machine`: What the machine can do, measured in the process that runs the engines: caches, memory bandwidth, random row access, the compute ceiling of its cores, and its load.
- `dpmf_lit.core.metrics`: Root mean squared error and mean absolute error, the empirical CDF of the absolute errors and the mean increase of the error over a baseline: the numbers that score every fit, on arrays alone.
- `dpmf_lit.core.privacy`: Noise samplers, the Laplace, Gaussian and analytic-Gaussian mechanisms, L2-Laplace noise, Rényi-DP and PLD accounting, and a small accountant that writes the privacy report.
- `dpmf_lit.core.ranking`: Recall@k and NDCG@k of a top-k list against each user's held-out items, the history excluded from the candidates: the numbers of the ranking task with new users (Liang et al. 2018), on arrays alone.
- `dpmf_lit.core.settings`: The reproduction's own settings: where data, figures and build outputs live, which profile the batch runs, how many jobs, and where each data set comes from.
- `dpmf_lit.core.stats`: The tests every paper's checks share: a sample against its law, independence, uniformity on Z_P, and exact binomial bounds for audits.
- `dpmf_lit.data.datasets`: Data sets by name: where `settings.ini` says each one lives, fetching MovieLens 100K (GroupLens or the RecBole wheel on PyPI), verifying count and checksum, and loading, with the public item features each one ships; a ratings file of one's own, by its path, through the same `load_dataset`.
- `dpmf_lit.data.formats`: Loaders for the published rating files (MovieLens, Netflix Prize, Yahoo! Music, Anime), one strict grammar per format parsed in one numba pass, and for a plain user,item,rating[,timestamp] file of one's own; every refusal names the file and the line.
- `dpmf_lit.data.implicit`: Binarized ratings and the new-user split of the ranking task (Liang et al. 2018): training users, and held-out users whose positives split into a history they fold in on their device and targets they are scored on.
- `dpmf_lit.data.item_features`: Public facts that each data set ships about its items (genres, release year, type): strict readers of the published files, their encoding as indicator columns, and their alignment with the item codes of `Ratings`.
- `dpmf_lit.data.ratings`: The one data model: aligned (user, item, rating) arrays with the matrix size, the rating range and the original ids; its checks and a canonical checksum.
- `dpmf_lit.data.splits`: Compact codes, count filters, the Netflix movie subsets, random subsamples, and the four ways to hold out ratings (random, k-fold, per user, public/private users), each seeded.
- `dpmf_lit.data.synthetic`: A generator of rating data of any size that looks like real data: user and item biases, public genre-like item features, low rank plus noise, power-law item popularity correlated with the item bias, log-normal user activity, unique pairs; tuned to MovieLens 100K's statistics; parallel, deterministic in the seed, and refused up front when it cannot fit in memory.
- `dpmf_lit.model.als`: The row solve every alternating-least-squares sweep repeats, two faster ways: the Gram matrix accumulated in blocks of four ratings (float32 inside a block of 64 ratings, float64 across blocks) before the same Cholesky solve, and a few conjugate-gradient steps warm-started at the current row, which never form the Gram matrix. Measured against the package's `als_sweep` in the batch entry `als-throughput`.
- `dpmf_lit.model.cards`: What each registered mechanism's paper states once, beside its class: the paper, the configuration under which its guarantee holds, its unit, its rows in the comparison, its audits, its role. The studies read their lists from the cards instead of keeping their own.
- `dpmf_lit.model.fold_in`: A held-out user's row solved from the released item side and their own history, on their device, then their top-k list scored: how every mechanism with an item side, and the release-nothing floor, are ranked.
- `dpmf_lit.model.linalg`: The item-major index of the ratings, the per-item normal equations of a least-squares problem with the profiles fixed, and the clipping of rows to a norm: the pieces Hua et al., DP-PMF, DPALS and the public-features mechanisms share, in one place below the papers.
- `dpmf_lit.model.mechanism`: What every mechanism implements: parameters declared once in its signature, a `fit` that does the shared work (checks, seeding, a memory estimate, timing, finite factors, the parameters that actually ran) around the mechanism's own `_fit`, a privacy report that always states its scope, and a registry that finds mechanisms without a hand-kept list.
- `dpmf_lit.model.mf`: The PMF objective, the metrics that score a fit, and the non-private PMF baseline, minimised by the kernels of `dpmf_lit.core.kernels` through the mechanism interface of `dpmf_lit.model.mechanism`.
- `dpmf_lit.model.testing`: Small problems and plain-numpy references of the kernels, shared by the tests and the notebooks so that no reference is typed twice.
- `dpmf_lit.model.vocabulary`: Every parameter name a mechanism may declare, with its one meaning; the table of every mechanism's parameters, and each paper's symbols against them.
- `dpmf_lit.papers.baselines`: What every private recommender must beat: the global mean, each user's own mean computed on the user's device, item means, global + user + item biases, and those biases with user-level differential privacy from one Gaussian release of item sums and counts.
- `dpmf_lit.papers.dpals`: Chien et al. (2021): each user solves their own profile on their device; the items solve from Gaussian-noised sufficient statistics; user-level joint differential privacy, composed over the rounds
- `dpmf_lit.papers.dpals_adaptive`: Krichene et al. (2023)'s answer to DPALS's weakest items: instead of keeping $\tau$ of their ratings, each user keeps all of them and spreads a fixed budget of squared weights across them, more on the rarely rated items.
- `dpmf_lit.papers.dpals_implicit`: Chien et al. (2021)'s private alternating least squares on positives only: every item is pulled towards 0 through a global Gram released beside the per-item statistics, each user's row is solved on their device; and the release it must beat, noisy item counts.
- `dpmf_lit.papers.fixed_point`: Encoding reals as residues mod $P$ so that masked sums decode exactly: the arithmetic of Hua et al.'s (2015) masked aggregation.
- `dpmf_lit.papers.gauss`: Alternating gradient descent with Gaussian noise on the user-profile gradient and Rényi-DP accounting, reproduced, checked and tightened.
- `dpmf_lit.papers.hua`: Plain MF for U, then a perturbed least-squares problem for V with U fixed: the closed form, the paper's gradient descent, the privacy proof worked twice, and where it holds.
- `dpmf_lit.papers.hua_attacks`: Hua et al.'s protocol under test: the recommender receives only sums, the third party only uniform residues, and yet the recommender recovers each item's Gram matrix and, when users come and go, every rater's $r_{ij}u_i$.
- `dpmf_lit.papers.hua_protocol`: Users hold their own ratings and profiles; a third party sums masked gradients in Z_P; the recommender only ever sees noisy aggregates. A simulation with separate actors, exact fixed-point arithmetic, message and byte counts, and our verdict on each claim.
- `dpmf_lit.papers.pdp`: Probabilistic matrix factorization with objective perturbation (DP-PMF) and with personalized differential privacy by sampling (PDP-PMF): the mechanisms, the proofs checked, and where they hold.
- `dpmf_lit.papers.public`: What each user can do on their own device with the public facts a data set ships about its items, and the private releases that beat it: `user-features`, `dp-bias-features`, and DPALS with collective matrix factorization (Curmei et al. 2023)
- `dpmf_lit.papers.sgld`: One posterior sample of a tempered, bounded-likelihood MF posterior is user-level DP; stochastic gradient Langevin dynamics samples it at nearly the speed of SGD. Reproduced, the constants derived, the sampler audited.
- `dpmf_lit.papers.sgld_checks`: Liu, Wang & Smola (2015) verified: its constants on a posterior we can enumerate, SGLD's distance from an exact posterior, and an empirical lower bound on the ε of the release.
- `dpmf_lit.papers.xin`: Public users train a trace-norm model in its Σ-form; private users predict locally with Eq. 4; private users who contribute release 2nd-order information with 1st-order (element-wise) deniability: PMD and PMC. Element-wise deniability is **not** differential privacy.
- `dpmf_lit.records.experiment`: What an experiment notebook calls — `load_ratings`, `experiment_dir`, `save_figure`, `record` — and the small parsers of parameters and data-set names it shares with the command line.
- `dpmf_lit.records.provenance`: Which code made each figure: the manifest of experiments, the records of their runs, the stamps that say whether a committed figure is still the one the code makes, and the refusal to publish a record made from uncommitted code.
- `dpmf_lit.records.results`: Numbers quoted in the notebooks' prose are read from `figures/results.json` and asserted, so the prose cannot drift from the results the batch produced.
- `dpmf_lit.studies.audit`: Releases on two neighbouring data sets, a test chosen on a held-out share of the runs, one Clopper–Pearson bound from the rest, and a broken control (too little noise) that the audit must catch before its honest result means anything
- `dpmf_lit.studies.audit_bounds`: Clopper–Pearson bounds on two event rates, the statistics and the test chosen on a selection share, the μ-GDP bound and the ideal test's ceiling for a Gaussian release, the one-run bound with many canaries (Steinke, Nasr & Jagielski 2023), and the verdict: the statistics of [12_audit](12_audit.ipynb), apart from the fits.
- `dpmf_lit.studies.bench`: Rating updates per second of the dpmf SGD kernels against Surprise's SVD and LIBMF, in one run, on identical data and epochs, with the machine limits that explain the numbers.
- `dpmf_lit.studies.bench_mechanisms`: Ratings per second of a whole fit of each private mechanism, beside one epoch of the package's SGD kernel on the same data and threads; the fit at 100 M ratings with its wall time and peak memory.
- `dpmf_lit.studies.budgets`: At MovieLens 10M's shape, on a synthetic stand-in: DPALS's uniform and tail sampling, Krichene et al. (2023)'s adaptive weights, and the public-feature mechanisms, alone and combined, at equal ε per user; overall and on the least rated items, against the best release of nothing, with paired intervals.
- `dpmf_lit.studies.compare`: Which mechanism at which ε, and does it beat releasing nothing? Every mechanism of this repository at equal ε for a stated unit, over several random splits, tuned on validation and on a public stand-in, with paired intervals against the baselines that release nothing or little
- `dpmf_lit.studies.compare_figures`: Figures 1–3 of the comparison at equal privacy, drawn from its record: test RMSE against ε per unit, against the number of users, and by item popularity
- `dpmf_lit.studies.compare_stats`: What the comparison at equal privacy computes besides the fits: a public stand-in to choose settings on at no privacy cost, the margin over releasing nothing with its paired interval over users, seeds and splits, the verdict it supports, and item-popularity slices from DP counts
- `dpmf_lit.studies.meter`: Each Gaussian release and each objective perturbation, observed on neighbouring data sets with the second fit handed the first one's releases: the sensitivity the proof bounds, measured on the package's own clipping, trimming and noise, against the claim.
- `dpmf_lit.studies.meter_others`: One posterior sample, local responses, noisy gradient steps, noise shares and DPALS's worst case: each guarantee's loss read through the package's own code, against its claim.
- `dpmf_lit.studies.meter_public`: Neighbours built through the package's own loader — an item that loses its only rater, a user whose rating count and rows move, a user removed — and the checks that only such pairs can make: the shape and ids of every released array, the public stand-in and the data each [public tuning] row is chosen on, and one random stream per use.
- `dpmf_lit.studies.mutants`: Privacy bugs — noise halved, a clip removed, trimming ignored, a sensitivity under-counted, a seed reused, a release left out, a count printed — written into the package's own source one at a time; the privacy meter must kill every one, and the fast test lane fails unless it does.
- `dpmf_lit.studies.ranking`: Recall@20 and NDCG@20 of every ranking release at equal ε per user, each held-out user folding in on their device, against the best ranker that releases nothing; with paired intervals over users, seeds and splits, and the ranking mechanisms' privacy loss metered through their own code path.
- `dpmf_lit.studies.reference_engines`: The two libraries the benchmark measures against, each timed as a whole fit and run in a child process that cannot stop the benchmark."""

__version__ = "0.0.1"

# The names a newcomer starts from, importable from the top (`from dpmf_lit import load_dataset, get_mechanism`); each
# module is imported on first use, so `import dpmf_lit` stays cheap. Everything else lives in its layer folder.
_API = {"Ratings": "data", "load_dataset": "data", "random_split": "data",
        "Mechanism": "model.mechanism", "FittedModel": "model.mechanism", "get_mechanism": "model.mechanism",
        "mechanisms": "model.mechanism", "register_mechanism": "model.mechanism",
        "PrivacyReport": "core.privacy", "PrivacyAccountant": "core.privacy", "evaluate": "model.mf"}

def __getattr__(name):
    if name not in _API: raise AttributeError(f"module 'dpmf_lit' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"dpmf_lit.{_API[name]}"), name)

def __dir__(): return sorted([*globals(), *_API])
