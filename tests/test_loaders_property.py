"""Property-based tests of the loaders of dpmf_lit.data.formats, against an independent reference parser.

For every supported format:

* arbitrary input (random bytes, and near-valid files built from the format's own pieces) ends either in
  the same ratings the reference parser reads, or in a ValueError naming the same line (or saying the file
  holds no ratings) -- never another exception, never other data;
* valid files round-trip: a random rating table written in the format (with the spellings the grammar
  allows: padding, CRLF, `4.0` for 4, a byte-order mark) loads back to exactly that table.

The reference parser below is written from the grammar in nbs/00c_formats.ipynb, with Python's bytes,
regular expressions and `float`, and shares no code with the numba parsers it checks. Runs are derandomized
(deterministic in CI) and bounded in size and number.
"""
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dpmf_lit.data.formats import (load_anime, load_movielens_100k, load_movielens_csv, load_movielens_dat, load_netflix,
                              load_yahoo_r1, load_yahoo_r3)
from dpmf_lit.data.ratings import sha256_arrays, ratings_sha256

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
LO64, HI64 = -2**63, 2**63 - 1
BOM = b"\xef\xbb\xbf"


class Spec:
    "A table format as the reference parser sees it."
    def __init__(self, loader, fname, sep, n_fields, header, lo, hi, special=(), drop=(), finish_lo=None):
        self.loader, self.fname, self.sep, self.n_fields, self.header = loader, fname, sep, n_fields, header
        self.lo, self.hi, self.special, self.drop = lo, hi, special, drop
        self.finish_lo = finish_lo


TABLES = {
    "ml-100k": Spec(load_movielens_100k, "u.data", b"\t", 4, None, 1, 5),
    "ml-dat": Spec(load_movielens_dat, "ratings.dat", b"::", 4, None, 0.5, 5),
    "ml-csv": Spec(load_movielens_csv, "ratings.csv", b",", 4, "userId,movieId,rating,timestamp", 0.5, 5),
    "yahoo-r1": Spec(load_yahoo_r1, "r1.txt", b"\t", 3, None, 0, 100, special=(255,), drop=(255,)),
    "yahoo-r3": Spec(load_yahoo_r3, "r3.txt", b"\t", 3, None, 1, 5),
    "anime": Spec(load_anime, "rating.csv", b",", 3, "user_id,anime_id,rating", 1, 10, special=(-1,), drop=(-1,)),
}


# ---------------------------------------------------------------- the reference parser

class Bad(Exception):
    "The reference parser refuses the file: at `line`, or (line None) because it holds no ratings."
    def __init__(self, line):
        self.line = line


def _int64(field: bytes, digits_only=False):
    if not re.fullmatch(rb"[0-9]+" if digits_only else rb"-?[0-9]+", field): return None
    v = int(field)
    return v if LO64 <= v <= HI64 else None


def _number(field: bytes):
    "A decimal rating: '-'? digits ['.' digits], at most 15 significant digits and 22 decimals, as Python's float."
    if not re.fullmatch(rb"-?([0-9]+\.?[0-9]*|\.[0-9]+)", field): return None
    whole, _, frac = field.lstrip(b"-").partition(b".")
    frac = frac.rstrip(b"0")
    if int(whole + frac or b"0") >= 10**15 or len(frac) > 22: return None
    return float(field) + 0.0


def _lines(data: bytes):
    "(line number, content without trailing spaces and CRs) of the non-blank lines."
    for n, line in enumerate(data.split(b"\n"), 1):
        content = line.rstrip(b" \r")
        if content: yield n, content


def reference_table(data: bytes, spec: Spec):
    "The rows (user, item, rating, line) of a table file, or Bad(line)."
    if data.startswith(BOM): data = data[3:]
    first_data_line = 1
    if spec.header is not None:
        if not any(True for _ in _lines(data)): raise Bad(None)
        first = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        if first.lower() != spec.header.lower(): raise Bad(1)
        first_data_line = 2
    rows = []
    for n, content in _lines(data):
        if n < first_data_line: continue
        if spec.sep == b"::" and any(b":" in p for p in content.split(b"::")): raise Bad(n)
        fields = [f.strip(b" ") for f in content.split(spec.sep)]
        if len(fields) != spec.n_fields: raise Bad(n)
        u, i, r = _int64(fields[0]), _int64(fields[1]), _number(fields[2])
        if u is None or i is None or r is None or any(_int64(f) is None for f in fields[3:]): raise Bad(n)
        if not (spec.lo <= r <= spec.hi or r in spec.special): raise Bad(n)
        rows.append((u, i, r, n))
    if not rows: raise Bad(None)
    return rows


def reference_netflix(data: bytes):
    "The rows (customer, movie, rating, line) of a Netflix file, or Bad(line)."
    if data.startswith(BOM): data = data[3:]
    rows, movie = [], None
    for n, content in _lines(data):
        if content.endswith(b":"):
            movie = _int64(content[:-1], digits_only=True)
            if movie is None: raise Bad(n)
            continue
        if movie is None: raise Bad(n)
        parts = content.split(b",", 2)
        if len(parts) != 3 or not re.fullmatch(rb"[0-9-]+", parts[2]) or not re.fullmatch(rb"[0-9]+", parts[1]):
            raise Bad(n)
        cust = _int64(parts[0], digits_only=True)
        if cust is None or not 1 <= int(parts[1]) <= 5: raise Bad(n)
        rows.append((cust, movie, float(int(parts[1])), n))
    if not rows: raise Bad(None)
    return rows


def finish(rows, spec: Spec | None):
    "What the loader keeps: special ratings dropped; a repeated (user, item) pair refused."
    if spec is not None: rows = [row for row in rows if row[2] not in spec.drop]
    if not rows: raise Bad(None)
    return rows


def check(loader, path: Path, data: bytes, reference, spec=None):
    "The loader and the reference parser agree on `data`: the same rows, or a refusal naming the same line."
    path.write_bytes(data)
    try: rows = finish(reference(data), spec)
    except Bad as bad: rows, expected_line = None, bad.line
    try: r = loader(path)
    except ValueError as e:
        msg = str(e)
        assert rows is None or len({(u, i) for u, i, _, _ in rows}) < len(rows), f"refused a valid file: {msg}\n{data!r}"
        if rows is not None:                                    # a repeated pair, named by its two lines
            m = re.search(rf"at line (\d+) of {re.escape(str(path))} and line (\d+) of {re.escape(str(path))}", msg)
            assert m, msg
            at = {n: (u, i) for u, i, _, n in rows}
            a, b = int(m.group(1)), int(m.group(2))
            assert a != b and at[a] == at[b], (msg, data)
            event("refused: a repeated pair")
        elif expected_line is None: assert "empty data" in msg, (msg, data); event("refused: no ratings")
        else: assert f"{path}: line {expected_line}:" in msg, (msg, expected_line, data); event("refused: a bad line")
        return None
    assert rows is not None, f"accepted a file the grammar refuses at line {expected_line}: {data!r}"
    f = r.to_frame()
    got = list(zip(f.user.tolist(), f.item.tolist(), f.rating.tolist()))
    assert got == [(u, i, float(np.float32(x))) for u, i, x, _ in rows], data
    event("parsed")
    return r


# ---------------------------------------------------------------- arbitrary and near-valid input

JUNK = st.text(alphabet="0123456789-.:,\t \r+eExé\x00", max_size=6)
IDS = st.one_of(st.integers(LO64, HI64).map(str), st.integers(-10, 2000).map(str),
                st.sampled_from(["0", "-0", "007", str(HI64), str(LO64), str(2**63), str(-2**63 - 1), str(2**64 + 7),
                                 "1" * 25, "", " 5", "5 ", "+5", "1.0", "1e3", "x", "٣"]), JUNK)
RATINGS = st.one_of(st.sampled_from(["1", "2", "3", "4", "5", "0.5", "3.5", "4.0", "5.", ".5", "0", "-0", "-1", "255",
                                     "100", "101", "10", "11", "nan", "inf", "1e0", "+3", "2.675", "0.30000000000000004",
                                     "3.50000000000000000000", "1234567890123456", "999999999999999", "0." + "0" * 22 + "1",
                                     "18446744073709551619", "", "-", "."]),
                    st.floats(-2, 300, allow_nan=False).map(repr), st.integers(-3, 300).map(str), JUNK)
TIMES = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["", "1.5", str(2**63), "-1", "t"]), JUNK)


VALUES = {"ml-100k": [1, 2, 3, 4, 5], "ml-dat": [1, 2, 3, 4, 5, 0.5, 1.5, 4.5], "ml-csv": [0.5, 1, 2.5, 3, 4.5, 5],
          "yahoo-r1": [0, 1, 50, 99, 100, 255], "yahoo-r3": [1, 2, 3, 4, 5], "anime": [1, 5, 10, -1]}
SMALL_IDS = st.one_of(st.integers(0, 4), st.integers(LO64, HI64))       # small ids repeat pairs now and then


def spell(x: float, draw) -> str:
    "A spelling of rating x that the grammar reads as x."
    if float(x).is_integer():
        return draw(st.sampled_from([str(int(x)), f"{int(x)}.0", f"{int(x)}.00", f"{int(x)}."]))
    return draw(st.sampled_from([repr(float(x)), repr(float(x)) + "0"]))


@st.composite
def table_line(draw, spec: Spec, values):
    "Mostly a valid line; sometimes one field, separator or field count is corrupted."
    fields = [str(draw(SMALL_IDS)), str(draw(SMALL_IDS)), spell(draw(st.sampled_from(values)), draw)]
    fields += [draw(st.integers(0, 2**40).map(str)) for _ in range(spec.n_fields - 3)]
    seps = [spec.sep.decode()] * (spec.n_fields - 1)
    damage = draw(st.integers(0, 9))
    if damage == 7: fields[draw(st.integers(0, len(fields) - 1))] = draw(st.one_of(IDS, RATINGS, TIMES))
    elif damage == 8: seps[draw(st.integers(0, len(seps) - 1))] = draw(st.sampled_from([":", ":::", ",", "\t", ";", " ", ""]))
    elif damage == 9:
        if draw(st.booleans()): fields.pop(); seps.pop()
        else: fields.append(draw(TIMES)); seps.append(spec.sep.decode())
    pad = draw(st.sampled_from(["", "", " "]))
    return pad.join([""] + [f + sep for f, sep in zip(fields, seps + [""])] + [""]) if pad else "".join(
        f + sep for f, sep in zip(fields, seps + [""]))


@st.composite
def table_file(draw, spec: Spec, values):
    lines = []
    if spec.header is not None:
        lines.append(draw(st.sampled_from([spec.header] * 8 + [spec.header.upper(), f" {spec.header} ", "", "user,item,rating",
                                                                  spec.header.replace(",", ";")]) | JUNK))
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 9)) == 0: lines.append(draw(st.sampled_from(["", " ", "\r", " \t"]) | JUNK))
        else: lines.append(draw(table_line(spec, values)))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines) + draw(st.sampled_from(["", eol, eol + eol]))
    return draw(st.sampled_from([b"", BOM])) + text.encode()


@st.composite
def netflix_file(draw):
    lines = []
    for _ in range(draw(st.integers(0, 7))):
        kind = draw(st.integers(0, 19))
        if kind <= 3: lines.append(str(draw(SMALL_IDS.filter(lambda v: v >= 0))) + ":")
        elif kind == 4: lines.append(draw(IDS) + draw(st.sampled_from([":", ": ", ":\r", "::", ""])))
        elif kind == 5: lines.append(draw(st.sampled_from(["", " ", "\r"]) | JUNK))
        elif kind <= 7:
            date = draw(st.sampled_from(["2005-09-06", "", "2005/09/06", "---", "20050906", "2005-09-06,1"]))
            lines.append(f"{draw(IDS)},{draw(RATINGS)},{date}")
        else: lines.append(f"{draw(SMALL_IDS.filter(lambda v: v >= 0))},{draw(st.integers(1, 5))},2005-09-06")
    if lines and draw(st.integers(0, 3)): lines.insert(0, f"{draw(st.integers(1, 20))}:")
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return draw(st.sampled_from([b"", BOM])) + (eol.join(lines) + draw(st.sampled_from(["", eol]))).encode()


@pytest.mark.parametrize("name", list(TABLES))
@FAST
@given(data=st.one_of(st.binary(max_size=120), st.data()))
def test_table_loaders_refuse_or_parse_exactly(tmp_path, name, data):
    spec = TABLES[name]
    raw = data if isinstance(data, bytes) else data.draw(table_file(spec, VALUES[name]))
    check(spec.loader, tmp_path / spec.fname, raw, lambda d: reference_table(d, spec), spec)


@FAST
@given(data=st.one_of(st.binary(max_size=120), netflix_file()))
def test_netflix_loader_refuses_or_parses_exactly(tmp_path, data):
    check(load_netflix, tmp_path / "combined_data_1.txt", data, reference_netflix)


# ---------------------------------------------------------------- valid files round-trip

@st.composite
def rating_table(draw, values, ids=st.integers(LO64, HI64)):
    rows = draw(st.lists(st.tuples(ids, ids, st.sampled_from(values)), min_size=1, max_size=12,
                         unique_by=lambda t: (t[0], t[1])))
    return rows


@pytest.mark.parametrize("name", list(TABLES))
@FAST
@given(data=st.data())
def test_valid_tables_round_trip(tmp_path, name, data):
    spec = TABLES[name]
    rows = data.draw(rating_table(VALUES[name]))
    pad = data.draw(st.sampled_from(["", " ", "  "]))
    eol = data.draw(st.sampled_from(["\n", "\r\n"]))
    lines = [spec.header] if spec.header else []
    for u, i, x in rows:
        fields = [str(u), str(i), spell(x, data.draw)] + [str(data.draw(st.integers(0, 2**31)))] * (spec.n_fields - 3)
        lines.append(spec.sep.decode().join(pad + f + pad for f in fields))
    raw = data.draw(st.sampled_from([b"", BOM])) + (eol.join(lines) + eol).encode()
    path = tmp_path / spec.fname
    path.write_bytes(raw)
    kept = [row for row in rows if row[2] not in spec.drop]
    if not kept:
        with pytest.raises(ValueError, match="empty data"):
            spec.loader(path)
        return
    r = spec.loader(path)
    f = r.to_frame()
    assert list(zip(f.user.tolist(), f.item.tolist(), f.rating.tolist())) == [(u, i, float(x)) for u, i, x in kept]
    u, i, x = (np.array(c) for c in zip(*kept))
    assert ratings_sha256(r) == sha256_arrays(u, i, x.astype(np.float32))


@FAST
@given(data=st.data())
def test_valid_netflix_files_round_trip(tmp_path, data):
    rows = data.draw(rating_table([1, 2, 3, 4, 5], ids=st.integers(0, HI64)))
    blocks = data.draw(st.booleans())                    # one block per movie (sorted), or a 'MovieID:' line per rating
    if blocks: rows = sorted(rows, key=lambda t: t[1])
    lines, movie = [], None
    for u, i, x in rows:
        if not blocks or i != movie: lines.append(f"{i}:")
        movie = i
        lines.append(f"{u},{x},2005-09-06")
    path = tmp_path / "combined_data_1.txt"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    f = load_netflix(path).to_frame()
    assert list(zip(f.user.tolist(), f.item.tolist(), f.rating.tolist())) == [(u, i, float(x)) for u, i, x in rows]


# ---------------------------------------------------------------- a plain delimited file of one's own round-trips

WORD_IDS = st.text(alphabet="abcXYZ019_-.é", min_size=1, max_size=6).filter(lambda s: any(c.isalpha() for c in s))


@FAST
@given(data=st.data())
def test_plain_delimited_files_round_trip(tmp_path, data):
    "user,item,rating[,timestamp] in any delimiter, with or without a header: integer or string ids, any decimal ratings."
    from dpmf_lit.data import load_dataset
    ids = lambda: data.draw(st.sampled_from([st.integers(LO64, HI64), st.integers(0, 4), WORD_IDS]))
    rows = data.draw(st.lists(st.tuples(ids(), ids(), st.integers(-8, 40).map(lambda k: k / 4)), min_size=1, max_size=12,
                              unique_by=lambda t: (t[0], t[1])))
    sep = data.draw(st.sampled_from([",", "\t", ";", " ", "  "]))
    stamp, header = data.draw(st.booleans()), data.draw(st.booleans())
    eol = data.draw(st.sampled_from(["\n", "\r\n"]))
    lines = [sep.join(["user", "item", "rating"] + ["timestamp"] * stamp)] if header else []
    for u, i, x in rows:
        if data.draw(st.integers(0, 5)) == 0: lines.append("")
        lines.append(sep.join([str(u), str(i), data.draw(st.sampled_from([repr(x), f"{x:g}"]))] + ["978300760"] * stamp))
    path = tmp_path / data.draw(st.sampled_from(["mine.csv", "mine.tsv", "mine.txt", "mine.ratings"]))
    path.write_bytes(data.draw(st.sampled_from([b"", BOM])) + (eol.join(lines) + eol).encode())
    lo, hi = min(x for *_, x in rows), max(x for *_, x in rows)
    scale = data.draw(st.sampled_from([None, (lo - 1, hi + 0.5)]))
    if scale is None and lo == hi:
        with pytest.raises(ValueError, match="the scale cannot be read from the data"):
            load_dataset(path, format="delimited")
        return
    r = load_dataset(path, format="delimited", scale=scale)
    f = r.to_frame()
    assert list(zip(f.user.tolist(), f.item.tolist(), f.rating.tolist())) == [(u, i, float(np.float32(x))) for u, i, x in rows]
    assert (r.rating_min, r.rating_max, r.scale_source) == ((lo, hi, "data") if scale is None else (*scale, "declared"))
