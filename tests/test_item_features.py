"""Tests of dpmf_lit.data.item_features: the readers of the published item files on small fixtures written in each
format, every refusal naming its file and line, the encoding, the alignment with item codes, fetching and
loading through dpmf_lit.data.datasets, the CLI's --item-features, and the real MovieLens 100K features.
Nothing here is computed from ratings: the last tests check it."""
import io
import re
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpmf_lit.data import datasets as DS
from dpmf_lit.core.checks import UserError
from dpmf_lit.data import (ITEM_FORMATS, ItemFeatures, ItemTable, Ratings, attach_item_features, encode_items,
                           features_for, fetch_dataset, item_table_sha256, list_datasets, load_dataset, load_file,
                           parse_items, random_split, read_items, write_items)
from dpmf_lit.data.item_features import ANIME_ITEMS_HEADER, ML100K_GENRES, RECBOLE_ITEM_HEADER
from dpmf_lit.core.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "dpmf"

# ---------------------------------------------------------------- fixtures, one per published format

def flags(*genres):
    return "|".join("1" if g in genres else "0" for g in ML100K_GENRES)

CH = "Children's"
U_ITEM = (f"1|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/M/title-exact?Toy%20Story%20(1995)|{flags('Animation', CH, 'Comedy')}\n"
          f"2|GoldenEye (1995)|01-Jan-1995||http://us.imdb.com/M/title-exact?GoldenEye%20(1995)|{flags('Action', 'Adventure', 'Thriller')}\n"
          f"267|unknown||||{flags('unknown')}\n"
          f"1412|Land Before Time III: The Time of the Great Giving (1995) (V)|01-Jan-1995||http://us.imdb.com/|{flags('Animation', CH)}\n"
          f"1373|Good Morning (1971)|01-Jan-1971||http://us.imdb.com/M/title-exact?Good%20Morning%20(1971)|{flags('unknown')}\n"
          f"1300|'Til There Was You (1997)|01-Jan-1997||http://us.imdb.com/|{flags('Drama', 'Romance')}\n"
          f"1536|Aiqing wansui (1994)|22-Jul-1996||http://us.imdb.com/|{flags('Drama')}\n"
          f"1682|Scream of Stone (Schrei aus Stein) (1991)|08-Mar-1996||http://us.imdb.com/|{flags('Drama')}\n"
          f"543|Misérables, Les (1995)|01-Jan-1995||http://us.imdb.com/|{flags('Drama', 'Musical')}\n")
RECBOLE = (RECBOLE_ITEM_HEADER + "\n1\tToy Story\t1995\tAnimation Children's Comedy\n2\tGoldenEye\t1995\tAction Adventure Thriller\n"
           "267\tunkonwn\tunkonwn\tunknown\n1412\tLand Before Time III: The Time of the Great Giving (1995)\tV\tAnimation Children's\n")
MOVIES_DAT = "1::Toy Story (1995)::Animation|Children's|Comedy\n2::Jumanji (1995)::Adventure|Children's|Fantasy\n73::Misérables, Les (1995)::Drama|Musical\n"
MOVIES_CSV = ('movieId,title,genres\n1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n'
              '11,"American President, The (1995)",Comedy|Drama|Romance\n131260,Rentun Ruusu (2001),(no genres listed)\n'
              '99999,A Film Without A Year,Drama\n')
NETFLIX = "1,2003,Dinosaur Planet\n2,2004,Isle of Man TT 2004 Review\n3,1997,Character, The\n4,NULL,Épisode\n"
ANIME = (ANIME_ITEMS_HEADER + '\n32281,Kimi no Na wa.,"Drama, Romance, School, Supernatural",Movie,1,9.37,200630\n'
         '5114,Fullmetal Alchemist: Brotherhood,"Action, Adventure, Drama, Fantasy, Magic, Military, Shounen",TV,64,9.26,793665\n'
         '30484,Steins;Gate 0,"Sci-Fi, Thriller",,Unknown,,60999\n')
OWN = "item,budget,tags,studio\n10,1.5,a|b,X\n11,,b,\n12,3e2,,Y\n"


def write(path: Path, text: str, encoding="utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


FILES = {   # name -> (file name, text, encoding, format)
    "u.item": ("u.item", U_ITEM, "latin-1", "movielens-100k-items"),
    "recbole": ("ml-100k.item", RECBOLE, "utf-8", "recbole-items"),
    "ml-1m": ("movies.dat", MOVIES_DAT, "latin-1", "movielens-dat-items"),
    "ml-10m": ("movies.dat", MOVIES_DAT, "utf-8", "movielens-dat-items"),
    "ml-20m": ("movies.csv", MOVIES_CSV, "utf-8", "movielens-csv-items"),
    "netflix": ("movie_titles.txt", NETFLIX, "latin-1", "netflix-items"),
    "anime": ("anime.csv", ANIME, "utf-8", "anime-items"),
    "own": ("features.csv", OWN, "utf-8", "item-features-csv"),
}


@pytest.mark.parametrize("key", list(FILES))
def test_each_format_parses_and_is_recognised(tmp_path, key):
    fname, text, enc, fmt = FILES[key]
    path = write(tmp_path / fname, text, enc)
    t = read_items(path)                                   # format guessed from the first line
    n = len([l for l in text.splitlines() if l.strip()]) - (fmt not in ("movielens-100k-items", "movielens-dat-items", "netflix-items"))
    assert len(t) == n and t.source == str(path) and len(set(t.ids.tolist())) == n
    again = read_items(path, fmt)
    assert item_table_sha256(again) == item_table_sha256(t)
    assert fmt in ITEM_FORMATS


def test_what_each_reader_reads(tmp_path):
    gl = read_items(write(tmp_path / "u.item", U_ITEM, "latin-1"))
    assert gl.year[:4] == (1995, 1995, None, 1995) and gl.genres[0] == ("Animation", "Children's", "Comedy")
    assert gl.title[-1] == "Misérables, Les (1995)" and gl.year[6:8] == (1994, 1991)   # the film's year, not the release date
    dat1 = read_items(write(tmp_path / "1m" / "movies.dat", MOVIES_DAT, "latin-1"))
    dat10 = read_items(write(tmp_path / "10m" / "movies.dat", MOVIES_DAT, "utf-8"))
    assert dat1.title == dat10.title and dat1.title[2] == "Misérables, Les (1995)" and dat1.year == (1995, 1995, 1995)
    mc = read_items(write(tmp_path / "movies.csv", MOVIES_CSV))
    assert mc.title[1] == "American President, The (1995)" and mc.genres[2] == () and mc.year == (1995, 1995, 2001, None)
    nf = read_items(write(tmp_path / "movie_titles.txt", NETFLIX, "latin-1"))
    assert nf.year == (2003, 2004, 1997, None) and nf.title[2] == "Character, The" and nf.title[3] == "Épisode"
    assert nf.genres == ((),) * 4 and nf.type == (None,) * 4
    an = read_items(write(tmp_path / "anime.csv", ANIME))
    assert an.genres[1] == ("Action", "Adventure", "Drama", "Fantasy", "Magic", "Military", "Shounen")
    assert an.type == ("Movie", "TV", None) and an.year == (None,) * 3
    own = read_items(write(tmp_path / "features.csv", OWN))
    cols = dict(own.columns)
    assert cols["budget"].tolist() == [1.5, 0.0, 300.0] and cols["tags"] == (("a", "b"), ("b",), ()) and cols["studio"] == (("X",), (), ("Y",))


def test_grouplens_and_recbole_agree(tmp_path):
    "The two MovieLens 100K sources give the same table on the items both fixtures hold (titles aside)."
    gl = read_items(write(tmp_path / "u.item", U_ITEM, "latin-1"))
    rb = read_items(write(tmp_path / "ml-100k.item", RECBOLE))
    keep = np.isin(gl.ids, rb.ids)
    sub = lambda t, m: ItemTable(t.ids[m], *(tuple(np.array(x, dtype=object)[m]) for x in (t.title, t.genres, t.year, t.type)),
                                 source=t.source)
    assert item_table_sha256(sub(gl, keep)) == item_table_sha256(rb)
    for i, g, y in zip(rb.ids, rb.genres, rb.year):
        k = gl.ids.tolist().index(i)
        assert (gl.genres[k], gl.year[k]) == (g, y)


def test_the_real_recbole_copy_agrees_with_the_grouplens_lines(ml100k_items):
    "Every u.item line of the fixture (copied from GroupLens' file) parses to the row RecBole's copy has."
    gl = parse_items(U_ITEM.encode("latin-1"), "movielens-100k-items", "u.item")
    real = {int(i): (g, y) for i, g, y in zip(ml100k_items.ids, ml100k_items.genres, ml100k_items.year)}
    for i, g, y in zip(gl.ids, gl.genres, gl.year):
        assert real[int(i)] == (g, y), i


# ---------------------------------------------------------------- every refusal names the file and the line

BAD = [
    ("u.item", "u.item", U_ITEM + "3|Four Rooms (1995)|01-Jan-1995\n", "u.item line 10: expected 24 '|'-separated fields, got 3"),
    ("u.item", "u.item", U_ITEM.replace("01-Jan-1995", "1995-01-01", 1), "u.item line 1: release date '1995-01-01' is not a date dd-Mon-yyyy"),
    ("u.item", "u.item", U_ITEM.replace("|0|0|0|1|1|1|", "|0|0|0|1|2|1|", 1), "u.item line 1: genre flag 5 (Children's) is '2', not 0 or 1"),
    ("u.item", "u.item", U_ITEM.replace("267|", "x67|"), "u.item line 3: item id 'x67' is not an integer"),
    ("u.item", "u.item", U_ITEM + U_ITEM.splitlines()[1] + "\n", "u.item line 10: duplicate item id 2 (first at line 2)"),
    ("recbole", "ml-100k.item", RECBOLE.replace("\t1995\tAction", "\t19x5\tAction"), "ml-100k.item line 3: release year '19x5' is not a year (four digits)"),
    ("recbole", "ml-100k.item", RECBOLE.replace("movie_title:token_seq", "title"), "ml-100k.item line 1: expected the header"),
    ("recbole", "ml-100k.item", RECBOLE + "5\tCopycat\t1995\n", "ml-100k.item line 6: expected 4 tab-separated fields, got 3"),
    ("ml-1m", "movies.dat", MOVIES_DAT + "4::Waiting to Exhale (1995)\n", "movies.dat line 4: expected 3 '::'-separated fields (MovieID::Title::Genres), got 2"),
    ("ml-1m", "movies.dat", MOVIES_DAT.replace("Drama|Musical", "Drama||Musical"), "movies.dat line 3: genre list 'Drama||Musical' has an empty genre"),
    ("ml-20m", "movies.csv", MOVIES_CSV + "5,Father of the Bride Part II (1995)\n", "movies.csv line 6: expected 3 comma-separated fields (movieId,title,genres), got 2"),
    ("ml-20m", "movies.csv", MOVIES_CSV + '6,"Heat (1995),Action\n', "movies.csv line 6"),
    ("ml-20m", "movies.csv", MOVIES_CSV + "11,Again,Drama\n", "movies.csv line 6: duplicate item id 11 (first at line 3)"),
    ("netflix", "movie_titles.txt", NETFLIX + "5,20O4,Typo\n", "movie_titles.txt line 5: year of release '20O4' is not a year (four digits)"),
    ("netflix", "movie_titles.txt", NETFLIX + "6\n", "movie_titles.txt line 5: expected MovieID,YearOfRelease,Title, got 1 comma-separated field(s)"),
    ("anime", "anime.csv", ANIME + "1,x,Drama,TV\n", "anime.csv line 5: expected 7 comma-separated fields"),
    ("anime", "anime.csv", ANIME.replace("anime_id,", "id,"), "anime.csv line 1: expected the header"),
    ("own", "features.csv", OWN + "13,1,a,X,extra\n", "features.csv line 5: expected 4 comma-separated fields (as in the header), got 5"),
    ("own", "features.csv", OWN + "ten,1,a,X\n", "features.csv line 5: item id 'ten' is not an integer"),
    ("own", "features.csv", OWN.replace("budget", "tags"), "features.csv line 1: column name 'tags' appears twice"),
    ("own", "features.csv", OWN.replace("12,3e2", "12,1e999"), "features.csv line 4: budget=1e999 is beyond ±1e+06"),
    ("own", "features.csv", OWN.replace("12,3e2", "12,-1e30"), "features.csv line 4: budget=-1e30 is beyond ±1e+06: rescale the column"),
    ("own", "features.csv", "item\n1\n", "features.csv line 1: the header needs the item id column and at least one feature column"),
]


@pytest.mark.parametrize("key, fname, text, message", BAD, ids=[f"{b[0]}-{k}" for k, b in enumerate(BAD)])
def test_malformed_lines_are_refused_by_file_and_line(tmp_path, key, fname, text, message):
    enc, fmt = FILES[key][2], FILES[key][3]
    path = write(tmp_path / fname, text, enc)
    with pytest.raises(ValueError) as e:
        read_items(path, fmt)
    assert str(e.value).startswith(str(path)) and message.replace(fname, str(path), 1) in str(e.value), str(e.value)


def test_files_that_say_nothing(tmp_path):
    with pytest.raises(ValueError, match="no items"):
        read_items(write(tmp_path / "empty.csv", "\n\n"))
    with pytest.raises(ValueError, match="no items"):
        read_items(write(tmp_path / "header.csv", "movieId,title,genres\n"))
    with pytest.raises(ValueError, match="does not tell which item features format"):
        read_items(write(tmp_path / "odd.txt", "hello\n"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_items(tmp_path / "nothing.csv")
    with pytest.raises(ValueError, match="item_format='csv' must be one of"):
        read_items(write(tmp_path / "x.csv", OWN), "csv")


# ---------------------------------------------------------------- encoding and alignment

def test_encoding_has_a_fixed_column_order(tmp_path):
    gl = read_items(write(tmp_path / "u.item", U_ITEM, "latin-1"))
    X, names = encode_items(gl)
    genres = [n for n in names if n.startswith("genre:")]
    assert genres == sorted(genres) and names[len(genres):] == ("decade:1970s", "decade:1990s")
    assert X.dtype == np.float32 and X.shape == (len(gl), len(names)) and set(np.unique(X)) <= {0.0, 1.0}
    assert X[2].tolist() == [float(n == "genre:unknown") for n in names]                 # 267: no year, no decade
    an_names = encode_items(read_items(write(tmp_path / "anime.csv", ANIME)))[1]
    assert an_names[-2:] == ("type:Movie", "type:TV") and not any(n.startswith("decade:") for n in an_names)
    own_X, own_names = encode_items(read_items(write(tmp_path / "f.csv", OWN)))
    assert own_names == ("budget", "tags:a", "tags:b", "studio:X", "studio:Y")
    assert own_X.tolist() == [[1.5, 1, 1, 1, 0], [0, 0, 1, 0, 0], [300, 0, 0, 0, 1]]
    # the order of the lines does not change the columns
    shuffled = "\n".join(reversed(U_ITEM.strip().splitlines())) + "\n"
    assert encode_items(read_items(write(tmp_path / "r" / "u.item", shuffled, "latin-1")))[1] == names


def test_features_follow_the_item_codes(tmp_path):
    gl = read_items(write(tmp_path / "u.item", U_ITEM, "latin-1"))
    X, names = encode_items(gl)
    r = Ratings.from_ids([1, 1, 2, 3], [267, 9999, 2, 1], [4, 3, 5, 1], 1, 5)      # item 9999 is not in the file
    f = features_for(r, gl)
    assert isinstance(f, ItemFeatures) and f.names == names and f.source == gl.source
    assert r.item_ids.tolist() == [1, 2, 267, 9999] and f.known.tolist() == [True, True, True, False]
    for code, item in enumerate(r.item_ids):
        want = X[gl.ids.tolist().index(item)] if item in gl.ids else np.zeros(len(names))
        assert f.X[code].tolist() == want.tolist()
    coded = Ratings(np.array([0, 1], np.int32), np.array([0, 2], np.int32), np.array([3, 4], np.float32), 2, 3, 1, 5)
    g = features_for(coded, gl)                                                         # item_ids None: the codes are the ids
    assert g.known.tolist() == [False, True, True] and g.X[1].tolist() == X[0].tolist()
    with_f = attach_item_features(r, gl)
    assert with_f.item_features.X.tolist() == f.X.tolist() and with_f.take([0, 1]).item_features is with_f.item_features
    with pytest.raises(ValueError, match="table must be an ItemTable"):
        features_for(r, X)


def test_text_item_ids_match_a_file_of_text_ids_and_other_kinds_are_refused(tmp_path):
    "A ratings file with text ids gets the features of an item file with text ids; a file of the other kind is refused by name."
    r = Ratings.from_ids(["u1", "u1", "u2"], ["m1", "m2", "m9"], [4, 3, 5], 1, 5, name="rs.csv")
    own = write(tmp_path / "items_s.csv", "id,tags,budget\nm1,a,1\nm2,b,2\nm3,a,3\n")
    f = attach_item_features(r, read_items(own)).item_features
    assert f.known.tolist() == [True, True, False] and f.X[0].tolist() == [1.0, 0.0, 1.0] and f.listed == 3
    assert item_table_sha256(read_items(own)) == item_table_sha256(read_items(own))     # text ids hash too
    ints = write(tmp_path / "items.csv", "id,tags\n1,a\n2,b\n")
    with pytest.raises(ValueError, match=re.escape(f"{ints}: its item ids are integers and those of the ratings 'rs.csv' are text")):
        attach_item_features(r, read_items(ints))
    numbered = Ratings.from_ids([1, 2], [1, 2], [4, 3], 1, 5, name="r.csv")
    with pytest.raises(ValueError, match=re.escape(f"{own}: its item ids are text (e.g. 'm1') and those of the ratings 'r.csv' are numbers")):
        attach_item_features(numbered, read_items(own))
    with pytest.raises(ValueError, match="line 4: item id 'x3' is not an integer, while most of the file's ids are"):
        read_items(write(tmp_path / "typo.csv", "id,tags\n1,a\n2,b\nx3,a\n4,b\n"))


def test_features_beyond_the_limit_are_refused_naming_the_source_and_column():
    X = np.array([[0.0, 1e30], [1.0, -1e30]], np.float32)
    with pytest.raises(ValueError, match=re.escape("item features from huge.csv: column 'big' reaches 1e+30, beyond ±1e+06: rescale")):
        ItemFeatures(X, ("a", "big"), np.ones(2, bool), "huge.csv")
    assert ItemFeatures(X[:, :1], ("a",), np.ones(2, bool), "ok.csv").X.shape == (2, 1)


def test_write_items_round_trips(tmp_path):
    gl = read_items(write(tmp_path / "u.item", U_ITEM, "latin-1"))
    back = read_items(write_items(gl, tmp_path / "items.tsv"))
    assert item_table_sha256(back) == item_table_sha256(gl)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.tsv", "u.item"]           # no temporary file left
    with pytest.raises(ValueError, match="only ids, titles, years and genres"):
        write_items(read_items(write(tmp_path / "anime.csv", ANIME)), tmp_path / "anime.tsv")


# ---------------------------------------------------------------- nothing computed from ratings

def test_anime_rating_and_members_are_never_read(tmp_path):
    "anime.csv's rating and members are aggregates of the users' ratings and activity: changing them changes nothing."
    base = read_items(write(tmp_path / "a" / "anime.csv", ANIME))
    changed = ANIME.replace(",9.37,200630", ",1.00,3").replace(",9.26,793665", ",,not a number").replace(",,60999", ",10,0")
    other = read_items(write(tmp_path / "b" / "anime.csv", changed))
    assert item_table_sha256(other) == item_table_sha256(base)
    r = Ratings.from_ids([1, 2, 2], [32281, 5114, 30484], [8, 9, 7], 1, 10)
    assert features_for(r, other).X.tolist() == features_for(r, base).X.tolist()
    assert not any(n.split(":")[0] in ("rating", "members", "episodes") for n in features_for(r, base).names)


def test_movielens_features_do_not_depend_on_the_ratings(ml100k_items):
    ml = load_dataset("ml-100k", item_features=False)
    base = features_for(ml, ml100k_items)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(ml))
    shuffled = Ratings(ml.user[perm], ml.item[perm], rng.integers(1, 6, len(ml)).astype(np.float32), ml.n_users, ml.n_items,
                       1, 5, "shuffled", ml.user_ids, ml.item_ids)
    again = features_for(shuffled, ml100k_items)
    assert again.X.tobytes() == base.X.tobytes() and again.names == base.names and (again.known == base.known).all()
    train, test = random_split(ml.with_features(base), 0.2, seed=1)
    assert train.item_features.X.tobytes() == base.X.tobytes() and test.item_features is train.item_features


# ---------------------------------------------------------------- the real MovieLens 100K features

@pytest.fixture(scope="module")
def ml100k_items():
    "The item table of data/ml-100k/items.tsv, fetched (GroupLens or the RecBole wheel) if missing."
    s = load_settings()
    fetch_dataset("ml-100k", settings=s)
    return read_items(s.data_dir / "ml-100k" / s.dataset("ml-100k").item_files[0], s.dataset("ml-100k").item_format)


def test_real_movielens_100k_features(ml100k_items):
    src = load_settings().dataset("ml-100k")
    assert item_table_sha256(ml100k_items) == src.item_sha256
    ml = load_dataset("ml-100k")
    f = ml.item_features
    assert f is not None and f.X.shape[0] == ml.n_items == 1_682 and f.known.all()
    genres = [n for n in f.names if n.startswith("genre:")]
    decades = [n for n in f.names if n.startswith("decade:")]
    assert genres == sorted(f"genre:{g}" for g in ML100K_GENRES) and len(genres) == 19
    assert decades == [f"decade:{d}s" for d in range(1920, 2000, 10)] and len(f.names) == 27
    assert (f.X[:, :19].sum(1) >= 1).all()                         # every movie has a genre (267 and 1373: 'unknown')
    assert int(f.X[:, 19:].sum()) == 1_681                          # every movie but 267 has a decade
    assert f.source.endswith("items.tsv")


# ---------------------------------------------------------------- fetching and loading through settings.ini

def fake_zip(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return path


U_DATA = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n"


@pytest.fixture
def small_ml100k(tmp_path):
    "Settings whose ml-100k comes from local zips: three ratings, and the u.item fixture."
    ratings = fake_zip(tmp_path / "r.zip", "ml-100k/u.data", U_DATA.encode())
    items = fake_zip(tmp_path / "i.zip", "ml-100k/u.item", U_ITEM.encode("latin-1"))
    sha = item_table_sha256(parse_items(U_ITEM.encode("latin-1"), None, "u.item"))
    env = {"DPMF_DATA_DIR": str(tmp_path / "data"), "DPMF_ML_100K_URLS": f"file://{ratings}#ml-100k/u.data",
           "DPMF_ML_100K_N_RATINGS": "3", "DPMF_ML_100K_SHA256": "",
           "DPMF_ML_100K_ITEM_URLS": f"file://{tmp_path}/missing.zip#ml-100k/u.item file://{items}#ml-100k/u.item",
           "DPMF_ML_100K_ITEM_SHA256": sha}
    return lambda **more: load_settings(env={**env, **more})


def test_fetch_writes_the_item_file_even_when_the_ratings_are_there(small_ml100k, monkeypatch):
    s = small_ml100k()
    target = s.data_dir / "ml-100k" / "items.tsv"
    fetch_dataset("ml-100k", settings=s)
    assert target.is_file() and read_items(target, "recbole-items").source == str(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["items.tsv", "ratings.tsv"]    # nothing half-written
    target.unlink()
    fetch_dataset("ml-100k", settings=s)                           # ratings present and valid: the item file alone
    assert item_table_sha256(read_items(target)) == s.dataset("ml-100k").item_sha256
    monkeypatch.setattr(DS, "_download", lambda *a, **k: pytest.fail("downloaded although present"))
    fetch_dataset("ml-100k", settings=s)
    r = load_dataset("ml-100k", settings=s)
    assert r.item_features is not None and r.item_features.known.tolist() == [False, False, False]   # 242, 302, 377 not in the fixture


def test_fetch_refuses_items_that_do_not_verify(small_ml100k):
    s = small_ml100k(DPMF_ML_100K_ITEM_SHA256="0" * 64)
    with pytest.raises(UserError) as e:
        fetch_dataset("ml-100k", settings=s)
    msg = str(e.value)
    assert "could not fetch the item features of ml-100k; every source failed" in msg and "checksum of the parsed item table" in msg
    assert "missing.zip" in msg and not (s.data_dir / "ml-100k" / "items.tsv").exists()


def test_load_dataset_fetches_attaches_or_skips_items(small_ml100k, tmp_path, capsys):
    s = small_ml100k()
    r = load_dataset("ml-100k", settings=s)
    assert r.item_features is not None and r.item_features.n_items == r.n_items
    assert load_dataset("ml-100k", settings=s, item_features=False).item_features is None
    own = write(tmp_path / "mine.csv", "item,tag\n242,a\n377,b\n")
    f = load_dataset("ml-100k", settings=s, item_features=own).item_features
    assert f.source == str(own) and f.names == ("tag:a", "tag:b") and f.known.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="item_features=3 must be True, False or the path"):
        load_dataset("ml-100k", settings=s, item_features=3)
    with pytest.raises(ValueError, match="item_format='anime-items' is for an item features file given by its path"):
        load_dataset("ml-100k", settings=s, item_format="anime-items")
    (s.data_dir / "ml-100k" / "items.tsv").unlink()
    assert load_dataset("ml-100k", settings=s, fetch=False).item_features is None         # not fetched: none attached
    capsys.readouterr()
    assert load_dataset("ml-100k", settings=s).item_features is not None                   # fetched again, and said so
    assert "ml-100k: item features not found at" in capsys.readouterr().err


def test_hand_placed_data_sets_attach_their_item_file_when_present(tmp_path):
    s = load_settings(env={"DPMF_DATA_DIR": str(tmp_path), "DPMF_ML_1M_N_RATINGS": "3"})
    write(tmp_path / "ml-1m" / "ml-1m" / "ratings.dat", "1::1::5::978300760\n1::2::3::978302109\n2::1::4::978298413\n")
    assert load_dataset("ml-1m", settings=s).item_features is None                       # no movies.dat: none
    write(tmp_path / "ml-1m" / "ml-1m" / "movies.dat", MOVIES_DAT, "latin-1")
    f = load_dataset("ml-1m", settings=s).item_features
    assert f.known.all() and "genre:Fantasy" in f.names and f.X[1, f.names.index("genre:Fantasy")] == 1
    write(tmp_path / "ml-1m" / "ml-1m" / "movies.dat", MOVIES_DAT + "1::Again (1995)::Drama\n", "latin-1")
    with pytest.raises(ValueError, match=r"movies.dat line 4: duplicate item id 1 \(first at line 1\)"):
        load_dataset("ml-1m", settings=s)
    rows = {r.name: r for r in list_datasets(s)}
    assert rows["ml-1m"].item_features is True and rows["anime"].item_features is False and rows["yahoo-r1"].item_features is None


def test_load_file_attaches_a_users_file(tmp_path):
    ratings = write(tmp_path / "r.csv", "userId,movieId,rating,timestamp\n1,1,4,0\n2,11,3,0\n2,5,5,0\n")
    f = load_file(ratings, item_features=write(tmp_path / "movies.csv", MOVIES_CSV)).item_features
    assert f.known.tolist() == [True, False, True] and f.source == str(tmp_path / "movies.csv")
    assert load_file(ratings).item_features is None
    with pytest.raises(ValueError, match="movies.csv line 6"):
        load_file(ratings, item_features=write(tmp_path / "movies.csv", MOVIES_CSV + "1,x\n"))


# ---------------------------------------------------------------- the command line

def dpmf(*args):
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from dpmf_lit.cli.main import main; sys.exit(main())"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MPLBACKEND": "Agg"})


def test_cli_refuses_a_malformed_item_features_file_by_line(tmp_path):
    ratings = write(tmp_path / "r.csv", "userId,movieId,rating,timestamp\n" + "".join(f"{u},{i},{(u * i) % 5 + 1},0\n"
                                                                                     for u in range(1, 30) for i in range(1, 20)))
    bad = write(tmp_path / "movies.dat", MOVIES_DAT + "4::Waiting to Exhale (1995)\n")
    p = dpmf("fit", "pmf", "--dataset", ratings, "--item-features", bad, "--set", "d=2", "--set", "epochs=1")
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith(f"dpmf: error: {bad} line 4: expected 3 '::'-separated fields"), p.stderr
    assert "Traceback" not in p.stderr
    good = write(tmp_path / "own.csv", "item,tag\n1,a\n2,b\n")
    p = dpmf("fit", "pmf", "--dataset", ratings, "--item-features", good, "--set", "d=2", "--set", "epochs=1", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["item_features"] == str(good)


# ----------------------------------------------------------------- a reviewer's inputs: refused by line, not read silently
@pytest.mark.parametrize("text, message", [
    ("1,Toy Story (1995),Comedy\n2,Heat (1995),Action\n", "must be a header (column names), not an item ('1')"),
    ("item,budget\n1,10\n2,12\n3,1.5x\n4,9\n", "line 4: budget='1.5x' is not a number"),
    ("item,budget\n1,1e39\n", "line 2: budget=1e39 is beyond ±1e+06"),
    ("item,title\n" + "".join(f"{k},Film {k}\n" for k in range(1, 302)), "column 'title' has 301 distinct values for 301 items"),
])
def test_the_generic_format_refuses_what_it_would_misread(tmp_path, text, message):
    p = tmp_path / "mine.csv"; p.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)): read_items(p)


def test_offline_the_ratings_still_load_without_features(tmp_path, capsys):
    "Ratings present, their item file absent and unreachable: load_dataset warns and returns the ratings without features."
    s = load_settings(env={"DPMF_DATA_DIR": str(tmp_path / "data"), "DPMF_ML_100K_ITEM_URLS": (tmp_path / "nowhere.zip").as_uri() + "#u.item",
                           "DPMF_ML_100K_N_RATINGS": "3", "DPMF_ML_100K_SHA256": ""})
    ratings = s.data_dir / "ml-100k" / "ratings.tsv"
    ratings.parent.mkdir(parents=True); ratings.write_text("1\t1\t5\t0\n1\t2\t3\t0\n2\t1\t4\t0\n")
    r = DS.load_dataset("ml-100k", settings=s)
    assert len(r) == 3 and r.item_features is None
    assert "could not be fetched, loading the ratings without them" in capsys.readouterr().err


def test_a_data_set_names_its_item_file_relative_to_the_data_folder(ml100k_items):
    r = DS.load_dataset("ml-100k")
    assert r.item_features.source == "ml-100k/items.tsv"
