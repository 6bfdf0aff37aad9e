"""A literate, reproducible repository for differentially private matrix factorization

Modules:

- `dpmf_lit.settings`: The reproduction's own settings: where data, figures and build outputs live, which profile the batch runs, how many jobs, and where each data set comes from."""

__version__ = "0.0.1"
