"""Tests of dpmf_lit.data: data model, loaders on fixture files in each published format, fetching,
subsets, splits, the synthetic generator, and the error message of every bad input."""
import importlib
import hashlib
import time
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpmf_lit.data import datasets as DS
SY = importlib.import_module("dpmf_lit.data.synthetic")   # the module (the package's `synthetic` is the generator)
from dpmf_lit.core.checks import UserError
from dpmf_lit.data.ratings import sha256_arrays
from dpmf_lit.data import (Ratings, fetch_dataset, filter_counts, holdout_per_user, kfold, list_datasets, load_anime,
                           load_dataset, load_movielens_100k, load_movielens_csv, load_movielens_dat, load_netflix,
                           load_yahoo_r1, load_yahoo_r3, netflix_subset, public_private_users, random_split,
                           ratings_sha256, reindex, subsample, synthetic)
from dpmf_lit.core.settings import load_settings

ML100K_SHA = "41d46a525a0d7c661ac77be049d73801918d5b5c101a9662bf2f6750ff157c61"


def pairs(r):
    u, i = r.original_ids()
    return set(zip(u.tolist(), i.tolist()))


def random_ratings(n_users=60, n_items=40, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    u, i = np.nonzero(mask)
    return Ratings.from_ids(u + 1000, i + 5000, rng.integers(1, 6, len(u)), 1, 5, name="rand")


# ---------------------------------------------------------------- data model and bad input

def test_from_ids_codes_and_id_maps():
    r = Ratings.from_ids([30, 10, 30, 20], [7, 7, 9, 8], [1, 2, 3, 4.5], 1, 5, name="x")
    assert r.user_ids.tolist() == [10, 20, 30] and r.item_ids.tolist() == [7, 8, 9]
    assert r.user.tolist() == [2, 0, 2, 1] and r.item.tolist() == [0, 0, 2, 1]
    assert (r.user.dtype, r.item.dtype, r.rating.dtype) == (np.int32, np.int32, np.float32)
    assert (r.n_users, r.n_items, len(r)) == (3, 3, 4)
    u, i = r.original_ids()
    assert u.tolist() == [30, 10, 30, 20] and i.tolist() == [7, 7, 9, 8]
    assert r.validate() is r


@pytest.mark.parametrize("args, message", [
    (([1, 2], [1, 1], [3, 6]), "rating=6 at index 1 (user=2, item=1) is outside the declared range [1, 5]; 1 rating(s) out of range"),
    (([1, 2], [1, 1], [0.5, 3]), "rating=0.5 at index 0 (user=1, item=1) is outside the declared range [1, 5]"),
    (([1, 2, 3], [1, 1, 1], [3, np.nan, np.nan]), "rating is NaN at index 1 (user=2, item=1); 2 NaN rating(s)"),
    (([1, 2, 1], [4, 4, 4], [3, 3, 5]), "duplicate (user, item) pair (user=1, item=4) at index 0 and index 2; 1 duplicate rating(s)"),
    (([], [], []), "empty data (no ratings)"),
    (([1, 2], [1], [3, 4]), "must be 1-d of equal length"),
    ((np.array([1.0, np.nan]), [1, 2], [3, 4]), "missing user id at index 1"),
    (([1, 2], [1, 2], ["a", "b"]), "ratings are not numeric"),
])
def test_from_ids_bad_input(args, message):
    with pytest.raises(ValueError) as e:
        Ratings.from_ids(*args, rating_min=1, rating_max=5, name="bad")
    assert message in str(e.value) and "'bad'" in str(e.value)


def test_from_ids_bad_range_and_option():
    with pytest.raises(ValueError, match="rating_min=5 must be < rating_max=1"):
        Ratings.from_ids([1], [1], [3], 5, 1)
    with pytest.raises(ValueError, match="rating_min=nan"):
        Ratings.from_ids([1], [1], [3], float("nan"), 5)
    with pytest.raises(ValueError, match="on_duplicate='mean' must be one of"):
        Ratings.from_ids([1], [1], [3], 1, 5, on_duplicate="mean")


def test_on_duplicate_keeps_first_or_last():
    args = ([1, 2, 1, 1], [4, 4, 4, 5], [1, 2, 3, 4])
    assert Ratings.from_ids(*args, 1, 5, on_duplicate="first").to_frame().values.tolist() == [[1, 4, 1], [2, 4, 2], [1, 5, 4]]
    assert Ratings.from_ids(*args, 1, 5, on_duplicate="last").to_frame().values.tolist() == [[2, 4, 2], [1, 4, 3], [1, 5, 4]]


def test_validate_catches_each_problem():
    r = Ratings.from_ids([1, 2], [1, 2], [3, 4], 1, 5, name="v")
    bad = lambda **kw: Ratings(**{**dict(user=r.user, item=r.item, rating=r.rating, n_users=2, n_items=2,
                                         rating_min=1.0, rating_max=5.0, name="v"), **kw})
    cases = [
        (dict(rating=np.array([3, 9], np.float32)), "rating=9 at index 1"),
        (dict(rating=np.array([3, np.nan], np.float32)), "rating is NaN at index 1"),
        (dict(item=np.array([1, 1], np.int32), user=np.array([0, 0], np.int32)), "duplicate (user, item) pair (user=0, item=1) at index 0 and index 1"),
        (dict(user=np.zeros(0, np.int32), item=np.zeros(0, np.int32), rating=np.zeros(0, np.float32)), "empty data"),
        (dict(user=np.array([0, 2], np.int32)), "user codes span [0, 2], outside [0, n_users=2)"),
        (dict(user=r.user.astype(np.int64)), "user.dtype=int64 must be int32"),
        (dict(rating=r.rating[:1]), "differ in length"),
        (dict(user_ids=np.arange(3)), "len(user_ids)=3 != 2"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError) as e:
            bad(**kw).validate()
        assert msg in str(e.value), (kw, str(e.value))


def test_checksum_definition_and_order_invariance():
    r = Ratings.from_ids([5, 3, 5], [2, 9, 1], [4, 1, 2.5], 1, 5)
    h = hashlib.sha256()
    h.update(np.array([3, 5, 5], "<i8").tobytes()); h.update(np.array([9, 1, 2], "<i8").tobytes())
    h.update(np.array([1, 2.5, 4], "<f8").tobytes())
    assert ratings_sha256(r) == h.hexdigest()
    assert ratings_sha256(r.take(np.array([2, 0, 1]))) == h.hexdigest()
    assert ratings_sha256(reindex(r.take(np.array([0, 2])))) == ratings_sha256(Ratings.from_ids([5, 5], [2, 1], [4, 2.5], 1, 5))


# ---------------------------------------------------------------- loaders, one fixture per format

def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return path


def test_movielens_100k(tmp_path):
    f = write(tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t302\t5\t881250950\n")
    r = load_movielens_100k(f)
    assert (len(r), r.n_users, r.n_items, r.rating_min, r.rating_max) == (4, 3, 3, 1, 5)
    assert pairs(r) == {(196, 242), (186, 302), (22, 377), (196, 302)} and r.name == "ml-100k"


def test_movielens_1m_dat(tmp_path):
    f = write(tmp_path / "ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::1::978298413\n")
    r = load_movielens_dat(f)
    assert (len(r), r.n_users, r.n_items, r.rating_min) == (3, 2, 2, 1.0)
    assert sorted(r.to_frame().itertuples(index=False, name=None)) == [(1, 661, 3), (1, 1193, 5), (2, 1193, 1)]


def test_movielens_10m_half_stars(tmp_path):
    f = write(tmp_path / "ratings.dat", "1::122::0.5::838985046\n1::185::4.5::838983525\n3::122::5::838983392\n")
    r = load_movielens_dat(f, name="ml-10m")
    assert r.rating_min == 0.5 and sorted(r.rating.tolist()) == [0.5, 4.5, 5]


def test_movielens_20m_csv_with_crlf(tmp_path):
    f = write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\r\n1,2,3.5,1112486027\r\n1,29,0.5,1112484676\r\n2,2,5.0,1112484819\r\n")
    r = load_movielens_csv(f)
    assert (len(r), r.rating_min) == (3, 0.5) and sorted(r.rating.tolist()) == [0.5, 3.5, 5]


def test_netflix_training_set_and_combined_agree(tmp_path):
    write(tmp_path / "training_set" / "mv_0000001.txt", "1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n")
    write(tmp_path / "training_set" / "mv_0000002.txt", "2:\n2059652,4,2005-09-05\n1488844,1,2005-11-01\n")
    write(tmp_path / "combined_data_1.txt", "1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n")
    write(tmp_path / "combined_data_2.txt", "2:\n2059652,4,2005-09-05\n1488844,1,2005-11-01\n")
    a = load_netflix(tmp_path / "training_set")
    b = load_netflix([tmp_path / "combined_data_1.txt", tmp_path / "combined_data_2.txt"])
    assert ratings_sha256(a) == ratings_sha256(b)
    assert pairs(a) == {(1488844, 1), (822109, 1), (2059652, 2), (1488844, 2)}
    assert sorted(a.to_frame().query("item == 2").rating.tolist()) == [1, 4]


def test_netflix_combined_several_blocks_per_file(tmp_path):
    f = write(tmp_path / "combined_data_1.txt", "1:\n10,3,2005-09-06\n11,5,2005-05-13\n7:\n10,2,2004-01-01\n\n")
    r = load_netflix(f)
    assert sorted(r.to_frame().itertuples(index=False, name=None)) == [(10, 1, 3), (10, 7, 2), (11, 1, 5)]


def test_yahoo_r1_never_play_again(tmp_path):
    f = write(tmp_path / "r1.txt", "1\t100\t90\n1\t101\t255\n2\t100\t0\n2\t102\t100\n")
    drop = load_yahoo_r1(f)
    assert (len(drop), drop.rating_min, drop.rating_max) == (3, 0, 100) and 255 not in drop.rating
    zero = load_yahoo_r1(f, never_play_again="zero")
    assert len(zero) == 4 and zero.to_frame().query("item == 101").rating.tolist() == [0]
    with pytest.raises(ValueError, match="never_play_again='keep' must be one of 'drop', 'zero'"):
        load_yahoo_r1(f, never_play_again="keep")


def test_yahoo_r3(tmp_path):
    f = write(tmp_path / "r3.txt", "1\t14\t5\n1\t35\t1\n2\t14\t3\n")
    r = load_yahoo_r3(f)
    assert (len(r), r.n_users, r.n_items, r.rating_max) == (3, 2, 2, 5)


def test_anime_unrated(tmp_path):
    f = write(tmp_path / "rating.csv", "user_id,anime_id,rating\n1,20,-1\n1,24,-1\n1,79,10\n2,20,1\n")
    r = load_anime(f)
    assert (len(r), r.rating_min, r.rating_max) == (2, 1, 10) and sorted(r.rating.tolist()) == [1, 10]
    k = load_anime(f, keep_unrated=True)
    assert (len(k), k.rating_min) == (4, -1) and sorted(k.rating.tolist()) == [-1, -1, 1, 10]


MALFORMED = [
    (load_movielens_100k, "u.data", "1\t2\t3\t4\n1\t3\t4\n", 2, "expected 4 fields"),
    (load_movielens_100k, "u.data", "1\t2\t3\t4\n1\t3\tx\t4\n", 2, "rating 'x' is not a number"),
    (load_movielens_100k, "u.data", "1\t2\t3\t4\n\n1\t3\t9\t4\n", 3, "rating=9 is outside the declared range [1, 5]"),
    (load_movielens_dat, "ratings.dat", "1::2::3::4\n1::3::4::5\n1::4:5::6\n", 3, "malformed line"),
    (load_movielens_dat, "ratings.dat", "1::2::3::4\nu7::3::4::5\n", 2, "user id 'u7' is not an integer"),
    (load_movielens_dat, "ratings.dat", "1::2::3::4\n2::3::4::5::9\n", 2, "malformed line"),
    (load_movielens_csv, "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3.5,4\n1,3,,5\n", 3, "rating '' is not a number"),
    (load_movielens_csv, "ratings.csv", "user,movie,rating,time\n1,2,3.5,4\n", 1, "expected the header 'userId,movieId,rating,timestamp'"),
    (load_movielens_csv, "ratings.csv", "userId,movieId,rating,timestamp\n1,2,nan,4\n", 2, "rating 'nan' is not a number"),
    (load_yahoo_r1, "r1.txt", "1\t2\t50\n1\t3\t101\n", 2, "rating=101 is outside the declared range [0, 100] (special values (255,))"),
    (load_yahoo_r3, "r3.txt", "1\t2\t5\n1\t3\t0\n", 2, "rating=0 is outside the declared range [1, 5]"),
    (load_anime, "rating.csv", "user_id,anime_id,rating\n1,2,10\n1,3,11\n", 3, "rating=11 is outside the declared range [1, 10]"),
    (load_anime, "rating.csv", "user_id,anime_id,rating\n1,2,10\n1;3;5\n", 3, "expected 3 fields"),
    (load_netflix, "combined_data_1.txt", "1:\n5,3,2005-01-01\n6,3\n", 3, "malformed rating line"),
    (load_netflix, "combined_data_1.txt", "1:\n5,3,2005-01-01\nx2:\n", 3, "malformed 'MovieID:' line"),
    (load_netflix, "combined_data_1.txt", "5,3,2005-01-01\n", 1, "rating line before any 'MovieID:' line"),
    (load_netflix, "combined_data_1.txt", "1:\n5,3,2005-01-01\n6,7,2005-01-01\n", 3, "rating outside the declared range [1, 5]"),
]


@pytest.mark.parametrize("loader, fname, text, line, reason", MALFORMED)
def test_malformed_line_is_named(tmp_path, loader, fname, text, line, reason):
    f = write(tmp_path / fname, text)
    with pytest.raises(ValueError) as e:
        loader(f)
    msg = str(e.value)
    assert f"{f}: line {line}:" in msg and reason in msg, msg


@pytest.mark.parametrize("loader, fname", [(load_movielens_dat, "ratings.dat"), (load_movielens_csv, "ratings.csv"),
                                           (load_yahoo_r3, "r3.txt"), (load_netflix, "combined_data_1.txt")])
def test_empty_file(tmp_path, loader, fname):
    text = "userId,movieId,rating,timestamp\n" if fname.endswith(".csv") else ""
    f = write(tmp_path / fname, text)
    with pytest.raises(ValueError, match="empty data"):
        loader(f)


def test_duplicates_in_a_file_are_refused(tmp_path):
    f = write(tmp_path / "ratings.dat", "1::2::3::4\n1::2::4::5\n")
    with pytest.raises(ValueError) as e:
        load_movielens_dat(f)
    assert f"duplicate (user, item) pair (user=1, item=2) at line 1 of {f} and line 2 of {f}" in str(e.value)
    assert "pass on_duplicate='first' or 'last' (an argument of Ratings.from_ids, of every loader, of load_dataset" in str(e.value)
    assert "on the command line: dpmf fit --on-duplicate first" in str(e.value)


@pytest.mark.parametrize("loader, dataset, url", [
    (load_movielens_dat, "ml-1m", "https://files.grouplens.org/datasets/movielens/ml-1m.zip"),
    (load_movielens_csv, "ml-20m", "ml-20m.zip"),
    (load_yahoo_r1, "yahoo-r1", "webscope.sandbox.yahoo.com"),
    (load_anime, "anime", "kaggle.com/datasets/CooperUnion/anime-recommendations-database"),
    (load_netflix, "netflix", "kaggle.com/datasets/netflix-inc/netflix-prize-data"),
])
def test_missing_file_says_where_to_get_it(tmp_path, loader, dataset, url):
    f = tmp_path / "nothing-here.txt"
    with pytest.raises(FileNotFoundError) as e:
        loader(f) if loader is load_netflix else loader(f, name=dataset)
    msg = str(e.value)
    assert str(f) in msg and url in msg and "data/README.md" in msg, msg


# ---------------------------------------------------------------- settings-driven loading and fetching

@pytest.fixture
def tmp_settings(tmp_path):
    def make(**env):
        base = {"DPMF_DATA_DIR": str(tmp_path / "data"),
                "DPMF_ML_100K_ITEM_URLS": ""}    # the ratings alone here; fetching item files: tests/test_item_features.py
        return load_settings(env={**base, **{k: str(v) for k, v in env.items()}})
    return make


def test_load_dataset_dispatches_on_format(tmp_path, tmp_settings):
    s = tmp_settings(DPMF_ML_1M_N_RATINGS=3, DPMF_ANIME_N_RATINGS=3)
    write(s.data_dir / "ml-1m" / "ml-1m" / "ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n")
    r = load_dataset("ml-1m", settings=s)
    assert (len(r), r.name) == (3, "ml-1m")
    write(s.data_dir / "anime" / "rating.csv", "user_id,anime_id,rating\n1,20,-1\n1,24,10\n2,20,8\n")
    assert len(load_dataset("anime", settings=s)) == 2
    assert len(load_dataset("anime", settings=s, keep_unrated=True)) == 3   # n_ratings counts the rows as parsed
    with pytest.raises(ValueError, match=r"takes options \['keep_unrated', 'on_duplicate'\], not \['colour'\]"):
        load_dataset("anime", settings=s, colour="red")


def test_load_dataset_count_and_checksum_checks(tmp_settings):
    s = tmp_settings(DPMF_ML_1M_N_RATINGS=4)
    write(s.data_dir / "ml-1m" / "ml-1m" / "ratings.dat", "1::1193::5::978300760\n")
    with pytest.raises(ValueError, match="parsed 1 ratings but settings.ini expects n_ratings=4"):
        load_dataset("ml-1m", settings=s)
    assert len(load_dataset("ml-1m", settings=s, verify=False)) == 1
    s2 = tmp_settings(DPMF_ML_1M_N_RATINGS=1, DPMF_ML_1M_SHA256="0" * 64)
    with pytest.raises(ValueError, match="checksum of the parsed ratings is [0-9a-f]{64}, settings.ini expects 0000"):
        load_dataset("ml-1m", settings=s2)


def test_load_dataset_missing_manual_dataset(tmp_settings):
    s = tmp_settings()
    with pytest.raises(FileNotFoundError) as e:
        load_dataset("yahoo-r3", settings=s)
    msg = str(e.value)
    assert str(s.data_dir / "yahoo-r3" / "ydata-ymusic-rating-study-v1_0-train.txt") in msg and "Webscope" in msg
    with pytest.raises(ValueError, match="dataset='ml-7' is not in settings.ini"):
        load_dataset("ml-7", settings=s)


def test_netflix_training_set_folder_is_found(tmp_settings):
    s = tmp_settings(DPMF_NETFLIX_N_RATINGS=2)
    write(s.data_dir / "netflix" / "training_set" / "mv_0000001.txt", "1:\n5,3,2005-01-01\n6,4,2005-01-02\n")
    assert len(load_dataset("netflix", settings=s)) == 2


def fake_zip(path: Path, member: str, text: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, text)
    return path


U_DATA = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n"
INTER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n" + U_DATA
U_SHA = sha256_arrays(np.array([196, 186, 22]), np.array([242, 302, 377]), np.array([3.0, 3.0, 1.0]))


def test_fetch_tries_sources_in_order_verifies_and_writes_atomically(tmp_path, tmp_settings, monkeypatch):
    good = fake_zip(tmp_path / "recbole.whl", "recbole/ml-100k.inter", INTER)
    urls = f"file://{tmp_path}/nope.zip#ml-100k/u.data file://{good}#recbole/ml-100k.inter"
    s = tmp_settings(DPMF_ML_100K_URLS=urls, DPMF_ML_100K_N_RATINGS=3, DPMF_ML_100K_SHA256=U_SHA)
    path = fetch_dataset("ml-100k", settings=s)
    assert path == s.data_dir / "ml-100k" / "ratings.tsv"
    assert path.read_text() == U_DATA                      # the canonical 4-column form, no header
    assert [p.name for p in path.parent.iterdir()] == ["ratings.tsv"]   # no temporary file left
    r = load_dataset("ml-100k", settings=s)
    assert ratings_sha256(r) == U_SHA and len(r) == 3
    # present and valid: no download at all
    monkeypatch.setattr(DS, "_download", lambda *a, **k: pytest.fail("downloaded although present"))
    assert fetch_dataset("ml-100k", settings=s) == path


def test_fetch_rejects_wrong_checksum_and_leaves_nothing(tmp_path, tmp_settings):
    bad = fake_zip(tmp_path / "ml.zip", "ml-100k/u.data", U_DATA.replace("\t1\t", "\t2\t"))
    s = tmp_settings(DPMF_ML_100K_URLS=f"file://{bad}#ml-100k/u.data", DPMF_ML_100K_N_RATINGS=3, DPMF_ML_100K_SHA256=U_SHA)
    with pytest.raises(UserError) as e:
        fetch_dataset("ml-100k", settings=s)
    assert "every source failed" in str(e.value) and "checksum of the parsed ratings" in str(e.value)
    assert not (s.data_dir / "ml-100k").exists() or not any((s.data_dir / "ml-100k").iterdir())


def test_fetch_refetches_a_corrupt_file(tmp_path, tmp_settings):
    good = fake_zip(tmp_path / "ml.zip", "ml-100k/u.data", U_DATA)
    s = tmp_settings(DPMF_ML_100K_URLS=f"file://{good}#ml-100k/u.data", DPMF_ML_100K_N_RATINGS=3, DPMF_ML_100K_SHA256=U_SHA)
    target = write(s.data_dir / "ml-100k" / "ratings.tsv", U_DATA[:20])
    assert fetch_dataset("ml-100k", settings=s) == target and target.read_text() == U_DATA


def test_fetch_manual_dataset_says_how(tmp_settings):
    with pytest.raises(FileNotFoundError, match="ml-10m cannot be downloaded automatically. Get ml-10m from https://files.grouplens.org"):
        fetch_dataset("ml-10m", settings=tmp_settings())


def test_load_dataset_without_fetch_says_how(tmp_settings):
    with pytest.raises(FileNotFoundError) as e:
        load_dataset("ml-100k", settings=tmp_settings(), fetch=False)
    assert "ratings.tsv" in str(e.value) and "dpmf data fetch ml-100k" in str(e.value)


def test_fetch_from_the_recbole_wheel(tmp_settings):
    "The PyPI source on its own (the GroupLens URL is left out): pip download, read the wheel member, verify."
    s = tmp_settings(DPMF_ML_100K_URLS="pypi:recbole==1.2.1#recbole/dataset_example/ml-100k/ml-100k.inter")
    path = fetch_dataset("ml-100k", settings=s)
    r = load_movielens_100k(path)
    assert ratings_sha256(r) == ML100K_SHA and len(r) == 100_000
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    m = os.umask(0); os.umask(m)
    return m


def test_list_datasets(tmp_settings):
    s = tmp_settings()
    write(s.data_dir / "yahoo-r3" / "ydata-ymusic-rating-study-v1_0-train.txt", "1\t2\t3\n")
    rows = {row.name: row for row in list_datasets(s)}
    assert set(rows) >= {"ml-100k", "ml-1m", "ml-10m", "ml-20m", "netflix", "yahoo-r1", "yahoo-r3", "anime"}
    assert rows["yahoo-r3"].present and not rows["ml-1m"].present
    assert rows["ml-100k"].auto and not rows["netflix"].auto
    assert rows["anime"].format == "anime-csv" and "CC0" in rows["anime"].license
    assert rows["netflix"].path == s.data_dir / "netflix"


def test_real_movielens_100k():
    "The real data (fetched from GroupLens or the recbole wheel if missing): checksum and shape."
    r = load_dataset("ml-100k")
    assert ratings_sha256(r) == ML100K_SHA == load_settings().dataset("ml-100k").sha256
    assert (len(r), r.n_users, r.n_items) == (100_000, 943, 1_682)
    assert set(np.unique(r.rating).tolist()) == {1, 2, 3, 4, 5}
    r.validate()


# ---------------------------------------------------------------- subsets and filters

@pytest.mark.parametrize("bounds", [dict(min_user=5, min_item=8), dict(min_user=3, max_user=15, min_item=4, max_item=20)])
def test_filter_counts_reaches_a_fixed_point(bounds):
    r = random_ratings(80, 60, 0.2, seed=1)
    f = filter_counts(r, **bounds)
    uc, ic = np.bincount(f.user, minlength=f.n_users), np.bincount(f.item, minlength=f.n_items)
    assert uc.min() >= bounds["min_user"] and ic.min() >= bounds["min_item"]
    assert uc.max() <= bounds.get("max_user", 10**9) and ic.max() <= bounds.get("max_item", 10**9)
    assert pairs(f) <= pairs(r) and 0 < len(f) < len(r)
    assert len(filter_counts(f, **bounds)) == len(f)     # idempotent: a fixed point
    # maximal: every rating of r whose user and item both survive is kept
    fu, fi = set(f.user_ids.tolist()), set(f.item_ids.tolist())
    assert pairs(f) == {p for p in pairs(r) if p[0] in fu and p[1] in fi}


def test_filter_counts_iterates():
    # user 1 has 2 ratings, one of them on item 9 which only user 1 rated: removing item 9
    # (min_item=2) drops user 1 below min_user=2 in a second round.
    r = Ratings.from_ids([1, 1, 2, 2, 3, 3], [8, 9, 8, 7, 8, 7], [1, 2, 3, 4, 5, 1], 1, 5)
    f = filter_counts(r, min_user=2, min_item=2)
    assert pairs(f) == {(2, 8), (2, 7), (3, 8), (3, 7)}


def test_filter_bad_arguments():
    r = random_ratings()
    with pytest.raises(ValueError, match="min_user=0 must be an integer >= 1"):
        filter_counts(r, min_user=0)
    with pytest.raises(ValueError, match="max_item=2 must be >= min_item=5"):
        filter_counts(r, min_item=5, max_item=2)
    with pytest.raises(ValueError, match="leaves no ratings"):
        filter_counts(r, min_user=1000)


def test_reindex_keeps_original_ids():
    r = random_ratings()
    sub = r.take(r.user % 3 == 0)
    c = reindex(sub)
    assert c.n_users == len(np.unique(sub.user)) and c.n_items == len(np.unique(sub.item))
    assert pairs(c) == pairs(sub) and c.user.max() == c.n_users - 1
    c.validate()


def test_netflix_subset():
    r = random_ratings(100, 50, 0.3, seed=2)
    counts = np.bincount(r.item, minlength=r.n_items)
    most = netflix_subset(r, n_items=10)
    assert most.n_items == 10
    assert np.sort(np.bincount(most.item))[::-1].tolist() == np.sort(counts)[::-1][:10].tolist()
    first = netflix_subset(r, n_items=10, by="first")
    assert first.item_ids.tolist() == sorted(r.item_ids.tolist())[:10]
    rnd = netflix_subset(r, n_items=10, by="random", seed=4)
    assert rnd.item_ids.tolist() == netflix_subset(r, n_items=10, by="random", seed=4).item_ids.tolist()
    with pytest.raises(ValueError, match="n_items=51 exceeds the 50 items"):
        netflix_subset(r, n_items=51)
    with pytest.raises(ValueError, match="by='top' must be"):
        netflix_subset(r, by="top")


def test_subsample():
    r = random_ratings(100, 50, 0.3, seed=3)
    s = subsample(r, n_users=30, n_items=20, seed=1)
    assert s.n_users <= 30 and s.n_items <= 20 and pairs(s) <= pairs(r)
    assert ratings_sha256(s) == ratings_sha256(subsample(r, n_users=30, n_items=20, seed=1))
    assert ratings_sha256(s) != ratings_sha256(subsample(r, n_users=30, n_items=20, seed=2))
    assert subsample(r, n_users=30).n_users == 30
    with pytest.raises(ValueError, match="n_users=101 exceeds the 100 users"):
        subsample(r, n_users=101)


# ---------------------------------------------------------------- splits

def test_random_split_properties():
    r = random_ratings(seed=5)
    tr, te = random_split(r, 0.25, seed=7)
    assert len(te) == round(0.25 * len(r)) and len(tr) + len(te) == len(r)
    assert pairs(tr).isdisjoint(pairs(te)) and pairs(tr) | pairs(te) == pairs(r)
    assert (tr.n_users, tr.n_items, te.n_users) == (r.n_users, r.n_items, r.n_users)
    tr2, te2 = random_split(r, 0.25, seed=7)
    assert np.array_equal(te.user, te2.user) and np.array_equal(te.item, te2.item)
    assert pairs(random_split(r, 0.25, seed=8)[1]) != pairs(te)
    for bad in (0, 1, 1.5, -0.1, "0.2"):
        with pytest.raises(ValueError, match=rf"test_fraction={bad!r} must be a (finite )?number in \(0, 1\)"):
            random_split(r, bad)


def test_kfold_each_rating_in_exactly_one_test_fold():
    r = random_ratings(seed=6)
    folds = list(kfold(r, k=7, seed=3))
    assert len(folds) == 7
    seen = {}
    for f, (tr, te) in enumerate(folds):
        assert pairs(tr).isdisjoint(pairs(te)) and pairs(tr) | pairs(te) == pairs(r)
        for p in pairs(te): seen[p] = seen.get(p, 0) + 1
    assert set(seen) == pairs(r) and set(seen.values()) == {1}
    sizes = [len(te) for _, te in folds]
    assert max(sizes) - min(sizes) <= 1
    assert [pairs(te) for _, te in kfold(r, k=7, seed=3)] == [pairs(te) for _, te in folds]
    with pytest.raises(ValueError, match="k=1 must be an integer >= 2"):
        kfold(r, k=1)
    with pytest.raises(ValueError, match="k=100000 exceeds the number of ratings"):
        kfold(r, k=100_000)


def test_holdout_per_user():
    r = Ratings.from_ids(np.repeat([1, 2, 3, 4], [5, 2, 1, 3]), np.r_[0:5, 0:2, 0:1, 0:3], np.ones(11), 1, 5)
    tr, te = holdout_per_user(r, n_test=2, seed=1)
    per_user = {int(u): int(c) for u, c in zip(*np.unique(te.original_ids()[0], return_counts=True))}
    assert per_user == {1: 2, 4: 2}                       # users 2 (2 ratings) and 3 (1) stay in train
    assert pairs(tr).isdisjoint(pairs(te)) and pairs(tr) | pairs(te) == pairs(r)
    assert pairs(holdout_per_user(r, 2, seed=1)[1]) == pairs(te)
    with pytest.raises(ValueError, match="n_test=0 must be an integer >= 1"):
        holdout_per_user(r, n_test=0)
    with pytest.raises(ValueError, match="no user of .* has more than 5 ratings"):
        holdout_per_user(r, n_test=5)


def test_holdout_per_user_is_uniform_within_user():
    r = Ratings.from_ids(np.zeros(10, int), np.arange(10), np.ones(10), 1, 5)
    hits = np.zeros(10)
    for seed in range(2000):
        hits[holdout_per_user(r, 1, seed=seed)[1].item] += 1
    # each of 10 items is held out with probability 1/10: sd of a count is sqrt(2000*0.1*0.9) = 13.4
    assert np.abs(hits - 200).max() < 5 * 13.4


def test_public_private_users():
    r = random_ratings(50, 40, 0.3, seed=8)
    pub, priv = public_private_users(r, 0.2, by="most")
    pu, qu = set(pub.user.tolist()), set(priv.user.tolist())
    assert len(pu) == 10 and pu.isdisjoint(qu) and len(pub) + len(priv) == len(r)
    counts = np.bincount(r.user, minlength=r.n_users)
    assert min(counts[list(pu)]) >= max(counts[list(qu)])
    rp, rq = public_private_users(r, 0.2, by="random", seed=3)
    assert len(set(rp.user.tolist())) == 10 and pairs(rp) | pairs(rq) == pairs(r)
    assert pairs(rp) == pairs(public_private_users(r, 0.2, by="random", seed=3)[0])
    with pytest.raises(ValueError, match="by='best' must be one of 'most', 'random'"):
        public_private_users(r, 0.2, by="best")
    with pytest.raises(ValueError, match="public_fraction=0.001 of 50 users leaves no public"):
        public_private_users(r, 0.001)


# ---------------------------------------------------------------- synthetic

def test_synthetic_shape_validity_and_determinism():
    r = synthetic(3000, 400, 60_000, seed=11)
    assert (len(r), r.n_users, r.n_items, r.rating_min, r.rating_max) == (60_000, 3000, 400, 1, 5)
    r.validate()                                          # unique pairs, values on the scale
    assert set(np.unique(r.rating).tolist()) == {1, 2, 3, 4, 5}
    r1 = synthetic(3000, 400, 60_000, seed=11, threads=1)
    assert np.array_equal(r.user, r1.user) and np.array_equal(r.item, r1.item) and np.array_equal(r.rating, r1.rating)
    assert ratings_sha256(synthetic(3000, 400, 60_000, seed=12)) != ratings_sha256(r)
    assert np.bincount(r.user, minlength=r.n_users).min() >= 1


@pytest.mark.parametrize("shape", [(40, 25, 1000), (100, 30, 2999), (5, 1000, 3), (1, 1, 1)])
def test_synthetic_dense_and_tiny(shape):
    r = synthetic(*shape, seed=0)
    assert len(r) == shape[2]
    r.validate()


def test_synthetic_follows_the_low_rank_model():
    r, truth = synthetic(2000, 300, 40_000, rank=4, noise=0.0, rating_levels=7, seed=2, return_truth=True)
    dot = np.einsum("ij,ij->i", truth["U"][r.user].astype(np.float64), truth["V"][r.item].astype(np.float64))
    bias = truth["user_bias"][r.user].astype(np.float64) + truth["item_bias"][r.item]
    expect = np.clip(np.floor(truth["mu"] + bias + truth["scale"] * dot + 0.5), 1, 7)
    assert np.mean(expect == r.rating) > 0.9999            # exact up to float32 rounding at .5 boundaries
    assert abs(np.var(dot) - 1) < 0.1                      # factors scaled so u.v has unit variance


def test_synthetic_noise_has_the_requested_sd():
    sigma = 0.8
    r, t = synthetic(4000, 500, 100_000, noise=sigma, rating_levels=101, seed=5, return_truth=True)
    x = (t["mu"] + t["user_bias"][r.user].astype(np.float64) + t["item_bias"][r.item]
         + t["scale"] * np.einsum("ij,ij->i", t["U"][r.user].astype(np.float64), t["V"][r.item].astype(np.float64)))
    inner = (x > 5) & (x < 97)                             # away from clipping
    resid = r.rating[inner] - x[inner]
    # rating = round(x + sigma*z): residual variance sigma^2 + 1/12, mean 0
    assert abs(resid.mean()) < 5 * np.sqrt(sigma**2 + 1 / 12) / np.sqrt(inner.sum())
    assert abs(resid.var() - (sigma**2 + 1 / 12)) < 0.02


def test_synthetic_effects_off_is_the_plain_low_rank_generator():
    "With the biases and features off (and the old offset and scale), the ratings are those of the generator before them."
    plain = dict(user_bias_sd=0, item_bias_sd=0, n_features=0, mean=3, interaction_sd=1)
    r = synthetic(300, 80, 8_000, seed=2, noise=0.5, **plain)
    assert r.item_features is None
    assert ratings_sha256(r) == "69b8d458cf26a420fbc7a83af78d81e1301e18a2497f86c9beca25499ac96689"


def test_synthetic_item_features_are_public_and_seeded():
    r = synthetic(300, 200, 6_000, seed=4)
    f = r.item_features
    assert f.X.shape == (200, 19) and f.X.dtype == np.float32 and f.known.all() and f.source == "synthetic"
    assert f.names == tuple(f"genre:{k}" for k in range(19))
    again = synthetic(300, 200, 6_000, seed=4, threads=1)
    assert np.array_equal(again.item_features.X, f.X) and np.array_equal(again.rating, r.rating)
    assert not np.array_equal(synthetic(300, 200, 6_000, seed=5).item_features.X, f.X)
    # what only the ratings draw or use does not move the features: another noise level and offset change the ratings, not X
    other = synthetic(300, 200, 6_000, seed=4, noise=0.2, mean=3.0)
    assert not np.array_equal(other.rating, r.rating) and np.array_equal(other.item_features.X, f.X)


def test_synthetic_item_bias_tracks_popularity_and_features():
    r, t = synthetic(2000, 20_000, 40_000, seed=1, popularity_corr=0.35, feature_signal=0.25, return_truth=True)
    c, X = t["item_bias"].astype(np.float64), r.item_features.X
    A = np.hstack([np.ones((len(X), 1)), X])
    r2 = 1 - np.var(c - A @ np.linalg.lstsq(A, c, rcond=None)[0]) / np.var(c)
    assert abs(r2 - 0.25) < 0.03 and abs(np.corrcoef(c, np.log(t["weight"]))[0, 1] - 0.35) < 0.03
    assert abs(c.std() - 0.5) < 0.02


@pytest.mark.parametrize("count", [5, 13])                 # 13 of 20 items takes the Efraimidis-Spirakis path
def test_synthetic_sampling_without_replacement_matches_numpy(count):
    n_users, n_items, a = 20_000, 20, 1.0
    r = synthetic(n_users, n_items, n_users * count, popularity=a, activity_sigma=0.0, seed=9)
    assert (np.bincount(r.user) == count).all()
    ours = np.sort(np.bincount(r.item, minlength=n_items) / n_users)[::-1]     # inclusion frequency by popularity rank
    rng = np.random.default_rng(0)
    p = np.arange(1, n_items + 1.0) ** -a; p /= p.sum()
    ref_counts = np.zeros(n_items)
    for _ in range(n_users):
        ref_counts[rng.choice(n_items, count, replace=False, p=p)] += 1
    ref = ref_counts / n_users
    sd = np.sqrt(2 * ref * (1 - ref) / n_users) + 1e-9
    assert np.all(np.abs(ours - ref) < 5 * sd), (ours, ref)


def test_synthetic_power_law_popularity():
    r = synthetic(20_000, 5_000, 100_000, popularity=1.0, seed=3)
    ic = np.sort(np.bincount(r.item, minlength=r.n_items))[::-1]
    ranks = np.arange(10, 201)
    slope = np.polyfit(np.log(ranks), np.log(ic[ranks - 1]), 1)[0]
    assert -1.1 < slope < -0.9
    flat = np.bincount(synthetic(20_000, 100, 100_000, popularity=0.0, seed=3).item)
    assert flat.max() / flat.min() < 1.2


@pytest.mark.parametrize("kw, message", [
    (dict(n_users=0), "n_users=0 must be an integer >= 1"),
    (dict(n_ratings=10 * 10 + 1), "n_ratings=101 exceeds n_users*n_items=100"),
    (dict(rank=0), "rank=0 must be an integer >= 1"),
    (dict(rating_levels=1), "rating_levels=1 must be an integer >= 2"),
    (dict(noise=-1.0), "noise=-1.0 must be a finite number >= 0"),
    (dict(popularity=float("nan")), "popularity=nan must be a finite number >= 0"),
    (dict(n_items=2.5), "n_items=2.5 must be an integer >= 1"),
    (dict(threads=0), "threads=0 must be an integer >= 1"),
    (dict(user_bias_sd=-0.1), "user_bias_sd=-0.1 must be a finite number >= 0"),
    (dict(item_bias_sd=float("inf")), "item_bias_sd=inf must be a finite number >= 0"),
    (dict(n_features=-1), "n_features=-1 must be an integer >= 0"),
    (dict(feature_signal=1.5), "feature_signal=1.5 must be a finite number in [0, 1]"),
    (dict(popularity_corr=-2), "popularity_corr=-2 must be a finite number in [-1, 1]"),
    (dict(feature_signal=0.9, popularity_corr=0.5), "feature_signal + popularity_corr**2 = 1.15, must be at most 1"),
    (dict(mean=0.5), "mean=0.5 must be a finite number in [1, 5]"),
    (dict(interaction_sd=-1), "interaction_sd=-1 must be a finite number >= 0"),
])
def test_synthetic_bad_input(kw, message):
    args = {**dict(n_users=10, n_items=10, n_ratings=50), **kw}
    with pytest.raises(ValueError) as e:
        synthetic(**args)
    assert message in str(e.value)


# ---------------------------------------------------------------- reliability: no misparse, no wrap-around, no traceback

@pytest.mark.parametrize("line", ["1::2:3:4::978300760", "1:2:3:4:5:6:7", "1:::2::3::4", "1::2::3::4:"])
def test_movielens_dat_refuses_lone_colons(tmp_path, line):
    "Lines with as many ':' as a good line but not four '::'-separated fields were read as other ids and ratings."
    f = write(tmp_path / "ratings.dat", f"1::1193::5::978300760\n{line}\n")
    with pytest.raises(ValueError) as e:
        load_movielens_dat(f)
    assert f"{f}: line 2: malformed line (a single ':' where fields are separated by '::')" in str(e.value)


BIG = [2**63, 2**64 + 7, -2**63 - 1, 10**30]
ID_FILES = [  # loader, file name, text with {u} as the user id and {i} as the item id, line of the second rating
    (load_movielens_100k, "u.data", "7\t1\t3\t881250949\n{u}\t{i}\t4\t881250950\n", 2),
    (load_movielens_dat, "ratings.dat", "7::1::3::978300760\n{u}::{i}::4::978300760\n", 2),
    (load_movielens_csv, "ratings.csv", "userId,movieId,rating,timestamp\n7,1,3,1\n{u},{i},4,2\n", 3),
    (load_yahoo_r1, "r1.txt", "7\t1\t30\n{u}\t{i}\t40\n", 2),
    (load_yahoo_r3, "r3.txt", "7\t1\t3\n{u}\t{i}\t4\n", 2),
    (load_anime, "rating.csv", "user_id,anime_id,rating\n7,1,3\n{u},{i},4\n", 3),
]


@pytest.mark.parametrize("loader, fname, text, line", ID_FILES)
@pytest.mark.parametrize("big", BIG)
@pytest.mark.parametrize("where", ["user", "item"])
def test_ids_beyond_int64_are_refused_with_the_line(tmp_path, loader, fname, text, line, big, where):
    "The tab and csv loaders raised an OverflowError traceback on such ids."
    f = write(tmp_path / fname, text.format(u=big if where == "user" else 8, i=big if where == "item" else 2))
    with pytest.raises(ValueError) as e:
        loader(f)
    assert f"{f}: line {line}: malformed line ({where} id {big} is outside the supported range of ids " \
           "[-2^63, 2^63 - 1] (int64))" in str(e.value), str(e.value)


@pytest.mark.parametrize("loader, fname, text, line", ID_FILES)
def test_ids_at_the_ends_of_int64_are_read_exactly(tmp_path, loader, fname, text, line):
    lo, hi = -2**63, 2**63 - 1
    r = loader(write(tmp_path / fname, text.format(u=hi, i=lo)))
    assert pairs(r) == {(7, 1), (hi, lo)}
    assert ratings_sha256(r) == sha256_arrays(np.array([7, hi]), np.array([1, lo]), np.sort(r.rating))


@pytest.mark.parametrize("text, line, what", [
    ("1:\n7,3,2005-09-06\n18446744073709551623,4,2005-09-06\n", 3, "customer id outside the supported range of ids"),
    ("1:\n7,3,2005-09-06\n9223372036854775808,4,2005-09-06\n", 3, "customer id outside the supported range of ids"),
    ("1:\n7,3,2005-09-06\n18446744073709551617:\n7,4,2005-09-06\n", 3, "movie id outside the supported range of ids"),
    ("1:\n7,18446744073709551619,2005-09-06\n", 2, "rating outside the declared range [1, 5]"),
])
def test_netflix_ids_beyond_int64_are_refused(tmp_path, text, line, what):
    "2**64 + 7 was read as customer 7, and then a false duplicate named a pair that is not in the file."
    f = write(tmp_path / "combined_data_1.txt", text)
    with pytest.raises(ValueError) as e:
        load_netflix(f)
    assert f"{f}: line {line}: {what}" in str(e.value), str(e.value)


DUP_FILES = [  # loader, file name, text with a repeated pair on lines a and b (the second rating 4, the first 3)
    (load_movielens_100k, "u.data", "7\t1\t3\t1\n8\t1\t5\t1\n7\t1\t4\t2\n", 1, 3),
    (load_movielens_dat, "ratings.dat", "7::1::3::1\n8::1::5::1\n7::1::4::2\n", 1, 3),
    (load_movielens_csv, "ratings.csv", "userId,movieId,rating,timestamp\n7,1,3,1\n8,1,5,1\n7,1,4,2\n", 2, 4),
    (load_netflix, "combined_data_1.txt", "1:\n7,3,2005-01-01\n8,5,2005-01-01\n2:\n8,2,2005-01-01\n1:\n7,4,2005-01-02\n", 2, 7),
    (load_yahoo_r1, "r1.txt", "7\t1\t3\n8\t1\t255\n8\t2\t5\n7\t1\t4\n", 1, 4),
    (load_yahoo_r3, "r3.txt", "7\t1\t3\n8\t1\t5\n7\t1\t4\n", 1, 3),
    (load_anime, "rating.csv", "user_id,anime_id,rating\n7,1,3\n8,1,-1\n8,2,5\n7,1,4\n", 2, 5),
]


@pytest.mark.parametrize("loader, fname, text, a, b", DUP_FILES)
def test_every_loader_names_duplicate_lines_and_takes_on_duplicate(tmp_path, loader, fname, text, a, b):
    "The message suggested on_duplicate, which no loader but load_anime accepted."
    f = write(tmp_path / fname, text)
    with pytest.raises(ValueError) as e:
        loader(f)
    assert f"(user=7, item=1) at line {a} of {f} and line {b} of {f}" in str(e.value), str(e.value)
    assert "pass on_duplicate='first' or 'last'" in str(e.value)
    first, last = loader(f, on_duplicate="first"), loader(f, on_duplicate="last")
    get = lambda r: r.to_frame().query("user == 7 and item == 1").rating.tolist()
    assert (get(first), get(last)) == ([3], [4]) and len(first) == len(last) == len(pairs(first))
    with pytest.raises(ValueError, match="on_duplicate='mean' must be one of 'error', 'first', 'last'"):
        loader(tmp_path / "not-read-at-all.txt", on_duplicate="mean")     # checked before the file is opened


def test_load_dataset_takes_on_duplicate(tmp_settings):
    s = tmp_settings(DPMF_ML_1M_N_RATINGS=3)
    write(s.data_dir / "ml-1m" / "ml-1m" / "ratings.dat", "1::1193::5::978300760\n2::661::3::978302109\n1::1193::4::978300761\n")
    with pytest.raises(ValueError, match="pass on_duplicate='first' or 'last'"):
        load_dataset("ml-1m", settings=s)
    assert load_dataset("ml-1m", settings=s, on_duplicate="last").to_frame().rating.tolist() == [3, 4]
    with pytest.raises(ValueError, match="on_duplicate='newest' must be one of"):
        load_dataset("ml-1m", settings=s, on_duplicate="newest")


def test_fetch_offline_fails_fast_with_a_user_error(tmp_path, tmp_settings, monkeypatch):
    "Offline, `dpmf data fetch ml-100k` escaped as an OSError traceback."
    monkeypatch.setenv("PIP_INDEX_URL", "https://127.0.0.1:9/simple")      # a closed port: pip cannot reach an index
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    urls = "http://127.0.0.1:9/ml-100k.zip#ml-100k/u.data pypi:recbole==1.2.1#recbole/dataset_example/ml-100k/ml-100k.inter"
    s = tmp_settings(DPMF_ML_100K_URLS=urls)
    t0 = time.perf_counter()
    with pytest.raises(UserError) as e:
        fetch_dataset("ml-100k", settings=s)
    seconds = time.perf_counter() - t0
    msg = str(e.value)
    assert "could not fetch ml-100k; every source failed" in msg
    assert "http://127.0.0.1:9/ml-100k.zip#ml-100k/u.data: URLError" in msg and "pip download recbole==1.2.1 failed" in msg
    assert f"copy it to {s.data_dir / 'ml-100k' / 'ratings.tsv'}" in msg and "download http://127.0.0.1:9/ml-100k.zip" in msg
    assert not (s.data_dir / "ml-100k" / "ratings.tsv").exists()
    assert seconds < 60, seconds


def test_load_dataset_says_when_it_downloads(tmp_path, tmp_settings, capsys):
    good = fake_zip(tmp_path / "ml.zip", "ml-100k/u.data", U_DATA)
    url = f"file://{good}#ml-100k/u.data"
    s = tmp_settings(DPMF_ML_100K_URLS=url, DPMF_ML_100K_N_RATINGS=3, DPMF_ML_100K_SHA256=U_SHA)
    target = s.data_dir / "ml-100k" / "ratings.tsv"
    assert len(load_dataset("ml-100k", settings=s)) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ml-100k: not found at {target}; downloading it from {url} to {target}"]
    load_dataset("ml-100k", settings=s)                    # present now: nothing said
    assert capsys.readouterr().err == ""


def test_synthetic_refuses_sizes_that_cannot_fit(monkeypatch):
    "synthetic(n_ratings=10**12) asked numpy for terabytes (MemoryError) instead of saying so."
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as e:
        synthetic(10**7, 10**6, 10**12)
    assert time.perf_counter() - t0 < 5                    # refused before anything is allocated
    msg = str(e.value)
    assert "synthetic(n_users=10000000, n_items=1000000, n_ratings=1000000000000, rank=10) needs about" in msg
    assert "GiB of memory, but" in msg and "GiB are available here" in msg
    monkeypatch.setattr(SY, "available_memory", lambda: 2**30)          # 1 GiB left
    need = SY.synthetic_memory(100_000, 10_000, 100_000_000)
    assert 1.1e9 < need < 1.3e9
    with pytest.raises(ValueError, match=r"needs about 1\.1 GiB of memory, but 1\.0 GiB are available here"):
        synthetic(100_000, 10_000, 100_000_000)
    assert len(synthetic(100, 50, 1000)) == 1000           # small sets still fit
    with pytest.raises(ValueError, match="n_users=3000000000 exceeds 2,147,483,647 \\(user and item codes are int32\\)"):
        synthetic(3 * 10**9, 10, 10)


def test_available_memory_reads_meminfo():
    have = SY.available_memory()
    total = int(next(l for l in open("/proc/meminfo") if l.startswith("MemTotal:")).split()[1]) * 1024
    assert have is not None and 0 < have <= total


def test_a_file_of_ones_own_is_read_by_its_extension(tmp_path):
    from dpmf_lit.data import check_file, is_ratings_path, load_file
    write(tmp_path / "u.data", "1\t2\t3\t0\n2\t2\t5\t0\n")
    write(tmp_path / "mine.dat", "1::2::3::0\n1::2::4::0\n")
    write(tmp_path / "anime.csv", "user_id,anime_id,rating\n1,2,9\n1,3,-1\n")
    write(tmp_path / "nf.txt", "7:\n1,3,2005-01-01\n")
    assert [check_file(tmp_path / n) for n in ("u.data", "mine.dat", "anime.csv", "nf.txt")] == \
           ["movielens-100k", "movielens-dat", "anime-csv", "netflix-combined"]
    r = load_file(tmp_path / "mine.dat", on_duplicate="first")
    assert r.name == str(tmp_path / "mine.dat") and r.rating.tolist() == [3.0]
    assert load_file(tmp_path / "anime.csv", keep_unrated=True).rating.tolist() == [9.0, -1.0]
    with pytest.raises(ValueError, match="takes options"): check_file(tmp_path / "u.data", keep_unrated=True)
    with pytest.raises(IsADirectoryError, match="is a folder, not a ratings file"): load_file(tmp_path)
    assert is_ratings_path(tmp_path / "u.data") and is_ratings_path("x.tsv") and not is_ratings_path("ml-1m")


# ---------------------------------------------------------------- a plain delimited file of one's own: user,item,rating[,timestamp]

PLAIN = [(1, 10, 4.0), (2, 10, 3.0), (2, 11, 5.0), (3, 12, 1.0)]


def plain_text(sep=",", header="user,item,rating", rows=PLAIN, stamp=False):
    "The rows written with `sep`, under `header` (None: no header line), with a timestamp column if `stamp`."
    head = [] if header is None else [header.replace(",", sep) + (f"{sep}timestamp" if stamp else "")]
    body = [sep.join(f"{v:g}" if isinstance(v, float) else str(v) for v in row) + (f"{sep}97800{k}" if stamp else "")
            for k, row in enumerate(rows)]
    return "\n".join(head + body) + "\n"


def table(r):
    "What a Ratings holds, for comparing two loads: ids as read, ratings, size, scale and where the scale came from."
    u, i = r.original_ids()
    return (u.tolist(), i.tolist(), r.rating.tolist(), r.n_users, r.n_items, r.rating_min, r.rating_max, r.scale_source)


def test_a_plain_csv_with_a_header_is_read(tmp_path):
    from dpmf_lit.data import check_file
    f = write(tmp_path / "ratings.csv", plain_text())
    assert check_file(f) == "delimited"
    r = load_dataset(f, scale=(1, 5))
    assert table(r) == ([1, 2, 2, 3], [10, 10, 11, 12], [4.0, 3.0, 5.0, 1.0], 3, 3, 1, 5, "declared")
    assert r.name == str(f) and r.user_ids.dtype == np.int64 and r.validate() is r


@pytest.mark.parametrize("sep", [",", "\t", ";", " ", "   "])
@pytest.mark.parametrize("header", ["user,item,rating", None])
def test_a_plain_file_in_each_delimiter_with_or_without_header(tmp_path, sep, header):
    want = table(load_dataset(write(tmp_path / "ref.csv", plain_text()), scale=(1, 5)))
    for name in ("ratings.csv", "ratings.tsv", "ratings.txt"):
        f = write(tmp_path / name, plain_text(sep, header))
        assert table(load_dataset(f, scale=(1, 5))) == want, (name, sep, header)
    assert table(load_dataset(f, scale="1,5", delimiter={"\t": "tab", ",": ",", ";": ";"}.get(sep, "whitespace"))) == want


def test_string_ids_float_ratings_and_a_timestamp_column(tmp_path):
    rows = [("alice", "The Matrix", 4.5), ("bob", "Alien", 0.5), ("alice", "Alien", 3.0), ("u 7", "x,y", 2.25)]
    text = "userId;title;stars;when\n" + "".join(f"{u};{i};{s};2020-01-0{k + 1}\n" for k, (u, i, s) in enumerate(rows))
    r = load_dataset(write(tmp_path / "mine.csv", text), scale=(0.5, 5))
    assert r.user_ids.tolist() == ["alice", "bob", "u 7"] and r.item_ids.tolist() == ["Alien", "The Matrix", "x,y"]
    assert sorted(zip(*[a.tolist() for a in r.original_ids()], r.rating.tolist())) == sorted(rows)
    stamped = load_dataset(write(tmp_path / "stamped.csv", plain_text(stamp=True)), scale=(1, 5))
    assert table(stamped) == table(load_dataset(write(tmp_path / "plain.csv", plain_text()), scale=(1, 5)))
    quoted = load_dataset(write(tmp_path / "quoted.csv", 'user,item,rating\n"a, b",1,2\nc,1,3.5\n'), scale=(1, 5))
    assert quoted.user_ids.tolist() == ["a, b", "c"] and quoted.rating.tolist() == [2.0, 3.5]


def test_columns_by_name_and_by_position(tmp_path):
    text = "".join(["movieId,rating,userId,timestamp,tag\n"] + [f"{i},{s:g},{u},0,t\n" for u, i, s in PLAIN])
    f = write(tmp_path / "other.csv", text)
    want = table(load_dataset(write(tmp_path / "plain.csv", plain_text()), scale=(1, 5)))
    assert table(load_dataset(f, scale=(1, 5), columns="userId,movieId,rating,timestamp")) == want
    assert table(load_dataset(f, scale=(1, 5), columns=("userId", "movieId", "rating"))) == want
    assert table(load_dataset(f, scale=(1, 5), columns="2,0,1")) == want
    assert table(load_dataset(f, scale=(1, 5), columns=(2, 0, 1, 3))) == want
    g = write(tmp_path / "noheader.txt", "".join(f"x\t{u}\t{i}\t{s:g}\n" for u, i, s in PLAIN))
    assert table(load_dataset(g, scale=(1, 5), columns="1,2,3")) == want


def test_the_scale_is_given_or_read_from_the_data_and_said_so(tmp_path, capsys):
    f = write(tmp_path / "ratings.csv", plain_text())
    r = load_dataset(f)
    err = capsys.readouterr().err
    assert (r.rating_min, r.rating_max, r.scale_source) == (1, 5, "data")
    assert f"{f}: rating scale [1, 5] read from the data" in err and "--scale LO,HI" in err and "scale=(LO, HI)" in err, err
    assert "not private" in err and "read from the data" in repr(r)
    assert r.take(np.array([0, 1])).scale_source == "data" and all(s.scale_source == "data" for s in random_split(r, 0.5, seed=0))
    wide = load_dataset(f, scale=(0, 10))
    assert (wide.rating_min, wide.rating_max, wide.scale_source) == (0, 10, "declared") and capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="every rating is 3: the scale cannot be read from the data; give scale="):
        load_dataset(write(tmp_path / "flat.csv", "1,1,3\n2,1,3\n"))


def test_a_rating_outside_the_given_scale_is_refused_with_its_line(tmp_path):
    f = write(tmp_path / "ratings.csv", "user,item,rating\n1,1,4\n\n1,2,6\n2,2,0\n")
    with pytest.raises(ValueError) as e:
        load_dataset(f, scale=(1, 5))
    msg = str(e.value)
    assert f"{f}: line 4: rating=6 is outside the scale [1, 5] given by scale=" in msg and "2 rating(s) outside it" in msg, msg
    for text, line, why in [("u,i,r\n1,2,3\n1,3,x\n", 3, "rating 'x' is not a number"),
                            ("u,i,r\n1,2,3\n1,3,nan\n", 3, "rating 'nan' is not a number"),
                            ("u,i,r\n1,2,3\n,3,4\n", 3, "user id is empty"),
                            ("u,i,r\n1,2,3\n1,3\n", 3, "expected 3 fields"),
                            ("u,i,r\n1,2,3\n1,3,4,5\n", 3, "expected 3 fields")]:
        g = write(tmp_path / "bad.csv", text)
        with pytest.raises(ValueError) as e:
            load_dataset(g, scale=(1, 5))
        assert f"{g}: line {line}:" in str(e.value) and why in str(e.value), (text, str(e.value))
    with pytest.raises(ValueError, match="empty data"):
        load_dataset(write(tmp_path / "empty.csv", "user,item,rating\n\n"), scale=(1, 5))


def test_repeated_pairs_in_a_plain_file_follow_on_duplicate(tmp_path):
    f = write(tmp_path / "ratings.csv", "user,item,rating\na,x,1\nb,x,2\na,x,5\n")
    with pytest.raises(ValueError) as e:
        load_dataset(f, scale=(1, 5))
    assert f"duplicate (user, item) pair (user='a', item='x') at line 2 of {f} and line 4 of {f}" in str(e.value), str(e.value)
    assert load_dataset(f, scale=(1, 5), on_duplicate="last").to_frame().values.tolist() == [["b", "x", 2.0], ["a", "x", 5.0]]


@pytest.mark.parametrize("options, message", [
    (dict(columns="uid,iid,r"), "columns='uid,iid,r': no column 'uid' in the header of {f} (its columns: userId, movieId, rating, timestamp)"),
    (dict(columns="userId,movieId"), "columns='userId,movieId': name 3 or 4 columns"),
    (dict(columns="0,1,7"), "columns='0,1,7': {f} has 4 fields per line"),
    (dict(columns="0,0,2"), "columns='0,0,2': column '0' twice"),
    (dict(columns=("userId", 1.5, "rating")), "columns=('userId', 1.5, 'rating')"),
    (dict(scale="5,1"), "scale='5,1': LO must be below HI"),
    (dict(scale="1"), "scale='1': two numbers LO,HI"),
    (dict(scale=(1, float("nan"))), "scale=(1, nan): two numbers LO,HI"),
    (dict(scale="a,b"), "scale='a,b': two numbers LO,HI"),
    (dict(delimiter="|"), "delimiter='|' must be one of"),
    (dict(format="delimited", keep_unrated=True), "takes options"),
])
def test_bad_columns_scale_and_delimiter_are_named_before_any_work(tmp_path, options, message):
    from dpmf_lit.data import check_file
    f = write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3,0\n")
    for call in (lambda: check_file(f, **options), lambda: load_dataset(f, **options)):
        with pytest.raises(ValueError) as e:
            call()
        assert message.format(f=f) in str(e.value), str(e.value)


def test_columns_by_name_need_a_header(tmp_path):
    f = write(tmp_path / "ratings.csv", "1,2,3\n")
    with pytest.raises(ValueError, match=r"columns='u,i,r': .*ratings.csv has no header line \(its first line is '1,2,3'\)"):
        load_dataset(f, columns="u,i,r")
    with pytest.raises(ValueError, match="has 5 fields per line; name the user, item, rating"):
        load_dataset(write(tmp_path / "five.csv", "1,2,3,4,5\n"))


def test_extensions_still_name_the_published_formats(tmp_path):
    "The published formats are detected as before; a file none of them reads goes to the delimited format."
    from dpmf_lit.data import check_file
    cases = {"u.tsv": ("1\t2\t3\t881250949\n", "movielens-100k"), "u.data": ("1\t2\t3\t881250949\n", "movielens-100k"),
             "ml.csv": ("userId,movieId,rating,timestamp\n1,2,3.5,0\n", "movielens-csv"),
             "anime.csv": ("user_id,anime_id,rating\n1,2,9\n", "anime-csv"), "nf.txt": ("7:\n1,3,2005-01-01\n", "netflix-combined"),
             "ml.dat": ("1::2::3::0\n", "movielens-dat"), "plain.tsv": ("user\titem\trating\n1\t2\t3\n", "delimited"),
             "three.tsv": ("1\t2\t3\n", "delimited"), "plain.txt": ("1,2,3\n", "delimited"), "spaced.txt": ("1 2 3 4\n", "delimited"),
             "plain.csv": ("1,2,3\n", "delimited")}
    for name, (text, fmt) in cases.items():
        assert check_file(write(tmp_path / name, text)) == fmt, name
    with pytest.raises(ValueError, match=r"may be any of \['yahoo-r1', 'yahoo-r3', 'delimited'\]"):
        check_file(write(tmp_path / "r3.txt", "1\t2\t3\n"))
    assert check_file(tmp_path / "r3.txt", scale="1,5") == "delimited"        # an option of the delimited format names it
    assert check_file(tmp_path / "u.data", columns="0,1,2") == "delimited"
    assert table(load_dataset(tmp_path / "u.data", scale=(1, 5))) == table(load_movielens_100k(tmp_path / "u.data"))


def test_load_dataset_takes_names_and_paths_alike(tmp_path, tmp_settings, monkeypatch):
    from dpmf_lit.data import load_file
    s = tmp_settings(DPMF_ML_1M_N_RATINGS=3)
    text = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n"
    f = write(s.data_dir / "ml-1m" / "ml-1m" / "ratings.dat", text)
    by_name, by_path = load_dataset("ml-1m", settings=s), load_dataset(f, settings=s)
    assert by_name.name == "ml-1m" and by_path.name == str(f) and table(by_name) == table(by_path)
    assert table(load_dataset(str(f), format="movielens-dat", name="mine")) == table(load_file(f))
    assert load_dataset(f, name="mine").name == "mine"
    monkeypatch.chdir(s.data_dir / "ml-1m")
    assert load_dataset("ml-1m/ratings.dat").name == "ml-1m/ratings.dat"      # a relative path, as given
    with pytest.raises(ValueError, match="format='movielens-dat' is for a ratings file given by its path"):
        load_dataset("ml-1m", settings=s, format="movielens-dat")
    with pytest.raises(ValueError, match="dataset='ml-7' is not in settings.ini"):
        load_dataset("ml-7", settings=s)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_dataset(tmp_path / "nothere.csv")


def test_a_plain_csv_copy_of_movielens_100k_is_movielens_100k(tmp_path):
    "The same ratings written as user,item,rating,timestamp: with --scale 1,5 the same Ratings, the same RMSE."
    import pandas as pd
    from dpmf_lit.cli.main import fit_report
    s = load_settings()
    load_dataset("ml-100k", settings=s)                                       # fetched if missing
    src = s.data_dir / "ml-100k" / s.dataset("ml-100k").files[0]
    df = pd.read_csv(src, sep="\t", header=None, names=["user", "item", "rating", "timestamp"])
    f = tmp_path / "ml100k.csv"
    df.to_csv(f, index=False)
    assert table(load_dataset(f, scale=(1, 5))) == table(load_movielens_100k(src))
    params = {"d": 8, "epochs": 1, "threads": 1, "seed": 0}
    csv = fit_report("pmf", str(f), params, settings=s, options={"scale": "1,5"})
    ml = fit_report("pmf", "ml-100k", params, settings=s)
    assert (csv["rmse"], csv["mae"], csv["n_train"]) == (ml["rmse"], ml["mae"], ml["n_train"]) and csv["dataset"] == str(f)


def test_a_scale_read_from_the_data_is_named_in_the_privacy_report(tmp_path, capsys):
    from dpmf_lit.model.mechanism import get_mechanism
    rows = "".join(f"{u},{i},{(u * i) % 5 + 1}\n" for u in range(40) for i in range(15))
    f = write(tmp_path / "ratings.csv", rows)
    read, given = load_dataset(f), load_dataset(f, scale=(1, 5))
    for mech, params in (("dp-bias", {"epsilon": 1.0, "seed": 0}), ("dpals", {"epsilon": 1.0, "seed": 0, "epochs": 1})):
        report = get_mechanism(mech)(**params).fit(read).privacy
        assert "the rating scale [1, 5] was read from the data" in report.scope and "not covered" in report.scope, report.scope
        assert report.coverage == "conditional" and report.summary().startswith(
            "if the rating scale [1, 5], read from the data, is public"), report.summary()   # the headline leads with it
        declared = get_mechanism(mech)(**params).fit(given).privacy
        assert "rating scale" not in declared.scope and "rating scale" not in declared.summary()
        assert declared.guarantee().startswith("if the catalogue of 15 items, read from the data, is public: (")   # no item file
        listed = get_mechanism(mech)(**params).fit(given.with_catalogue(np.arange(15))).privacy             # a declared catalogue
        assert listed.coverage == "end-to-end" and "end to end" in listed.guarantee()
    assert "rating scale" not in get_mechanism("pmf")(epochs=1).fit(read).privacy.scope   # non-private: no guarantee to qualify


def test_load_dataset_on_a_declared_catalogue(tmp_path):
    "load_dataset(..., catalogue=): codes over the list (an unrated item keeps one), read before the ratings; a bad list refused by name."
    f = write(tmp_path / "r.csv", "".join(f"{u},{i},3\n" for u in range(5) for i in (2, 4, 6)))
    r = load_dataset(f, scale=(1, 5), catalogue=[2, 3, 4, 5, 6])
    assert (r.n_items, r.catalogue_source, r.item_ids.tolist()) == (5, "declared", [2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match=r"the ratings name items that are not in the catalogue of 2 items"): load_dataset(f, scale=(1, 5), catalogue=[2, 4])
    with pytest.raises(ValueError, match="catalogue='/nonexistent/c.txt' cannot be read"): load_dataset(f, catalogue="/nonexistent/c.txt")


# ---------------------------------------------------------------- nothing read silently (cases of .ci/fuzz-cli)

BODY = "".join(f"u{u},i{i},{(u * i) % 5 + 1}\n" for u in range(6) for i in range(4))   # header-less; u1 and i1 occur
SILENT_READS = [   # (file text, the refusal): each was read silently or stopped with an internal error before
    ("u1,i1,NaN\n" + BODY, "line 1: malformed line (rating 'NaN' is not a number): 'u1,i1,NaN'"),
    ("u1,i1,\n" + BODY, "line 1: malformed line (rating is empty; expected 3 fields separated by ','): 'u1,i1,'"),
    ("u1,i1,good\n" + BODY, "line 1: malformed line (rating 'good' is not a number): 'u1,i1,good'"),
    ("7,8,good\n" + BODY, "line 1: malformed line (rating 'good' is not a number): '7,8,good'"),
    (BODY[:16] + "u\x009,i1,3\n" + BODY[16:], "line 3: malformed line (a NUL byte"),
    ("u\x009,i1,3\n" + BODY, "line 1: malformed line (a NUL byte"),
    ("u1,i9," + "x" * 10**6 + "\n" + BODY, "line 1: "),
    (BODY + "u9,i9," + "x" * 10**6 + "\n", "line 25: malformed line (rating 'xxxx"),
]


@pytest.mark.parametrize("text, message", SILENT_READS, ids=["nan-first", "empty-first", "word-first", "word-first-numeric-ids",
                                                             "nul-mid", "nul-first", "huge-first", "huge-last"])
def test_a_bad_line_is_refused_wherever_it_is_and_never_echoed_whole(tmp_path, text, message):
    f = write(tmp_path / "r.csv", text)
    for call in (lambda: load_dataset(f, scale=(1, 5)), lambda: DS.load_file(f)):
        with pytest.raises(ValueError) as e:
            call()
        assert f"{f}: {message}" in str(e.value) and len(str(e.value)) < 400, str(e.value)[:400]


def test_cr_line_ends_are_read_as_lf_ones_or_refused_by_name(tmp_path):
    "CR alone (classic Mac OS): a plain file reads as its LF twin, lines counted alike; a published format refuses it by name."
    text = "user,item,rating\n" + BODY[:40] + "\n" + BODY[40:]
    lf, cr = write(tmp_path / "lf.csv", text), write(tmp_path / "cr.csv", text.replace("\n", "\r"))
    assert table(load_dataset(cr, scale=(1, 5))) == table(load_dataset(lf, scale=(1, 5)))
    assert table(load_dataset(write(tmp_path / "nohead.csv", BODY.replace("\n", "\r")), scale=(1, 5)))[:3] == table(load_dataset(lf, scale=(1, 5)))[:3]
    bad = write(tmp_path / "bad.csv", text.replace("\n", "\r") + "u9,i9,x\r")
    with pytest.raises(ValueError, match=f"{bad}: line 27: malformed line \\(rating 'x' is not a number\\)"):
        load_dataset(bad, scale=(1, 5))
    mac = write(tmp_path / "u.data", "1\t2\t3\t881250949\r1\t3\t4\t881250950\r")
    with pytest.raises(ValueError, match="u.data: line 1: malformed line \\(its lines end with a carriage return alone"):
        load_dataset(mac)
    assert table(load_dataset(mac, format="delimited", scale=(1, 5)))[:3] == ([1, 1], [2, 3], [3.0, 4.0])


def test_random_bytes_are_refused_as_a_user_error(tmp_path):
    "Whatever the bytes, a plain file is read or refused with a ValueError naming it (was: csv's 'new-line character seen in unquoted field')."
    rng = np.random.default_rng(0)
    for k in range(60):
        f = write(tmp_path / f"junk{k}.csv", "")
        f.write_bytes(rng.integers(0, 256, int(rng.integers(1, 4000)), dtype=np.uint8).tobytes())
        with pytest.raises(ValueError, match=str(f)):
            load_dataset(f, scale=(1, 5))
