"""printf and format in people's own queries: SQLite's answers, without the one call no time limit
stops (a %c repeating its character past the length limit) (docs/concepts.md, docs/browse.md)."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings, strategies as st

from ledger import read_only_query
from ledger.storage.bounded_printf import _format_text, _repeats_past, bound_printf
from conftest import start_case

LIMIT = 10_000


@pytest.mark.parametrize("form, args, past", [
    ("%.*c", (2_000_000_000, "x"), True), ("%.*c", (LIMIT, "x"), False), ("%.*c", (LIMIT + 1, "x"), True),
    ("%.2000000000c", (), True), ("%.*c", (-2_000_000_000, "x"), True), ("%.*c", ("2000000000", "x"), True),
    ("%.*c", (2_000_000_000.7, "x"), True), ("%.*c", (2**32 + 5, "x"), False), ("%.*c", (-(2**31), "x"), False),
    ("%*.*c", (3, 2_000_000_000, "x"), True), ("%d %.*c", (1, 5, "x"), False), ("%%.*c %.*c", (7, "x"), False),
    ("%.2000000000s", ("x",), False), ("%.*d", (2_000_000_000, 1), False), ("%!.*c", (20_000, "x"), True),
    ("%.6000c%.6000c", ("x", "y"), True), ("%.6000c%.4000c", ("x", "y"), False), ("ab%T%.20000c", ("x",), False),
    ("%n%.*c", (20_000, "x"), True)])
def test_a_c_conversion_is_past_the_limit_as_sqlite_reads_its_precision(form, args, past):
    """Digits, or * taking the next argument as a 64-bit integer kept to 32 bits, negated when
    negative; only %c repeats (a string's precision cuts it short, a number's is fast), and the
    repeats of every %c count together (six of 60 MB each ran 2 s, thirty 11 s); SQLite stops at a
    letter it does not know (%T), and %n takes no argument."""
    with sqlite3.connect(":memory:") as probe:
        assert _repeats_past(form, args, LIMIT, probe) is past


_PIECES = st.sampled_from(["%d", "%s", "%c", "%.*c", "%5c", "%-4s", "%x", "%%", "%q", "%Q", "%.3f", "%!.3g",
                           "%,d", "%lld", "%*d", "%.*s", "%w", "%z", " ", "a", "é", "%", "\0", "%T", "%n", "%p"])
_VALUES = st.one_of(st.none(), st.integers(-(2**40), 2**40), st.integers(-3, 20), st.floats(allow_nan=False),
                    st.text(max_size=5), st.binary(max_size=5))


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=6), args=st.lists(_VALUES, max_size=6), as_blob=st.booleans())
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_bounded_printf_answers_as_sqlites_own(pieces, args, as_blob):
    """Every call it does not refuse at once is SQLite's printf, on a connection with the same limit
    (the format as text or as a blob, a NUL in it ending it)."""
    form = "".join(pieces).encode("utf-8") if as_blob else "".join(pieces)
    plain, bounded = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    try:
        for conn in (plain, bounded):
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
            conn.text_factory = bytes
        bound_printf(bounded, LIMIT)
        call = f"({', '.join('?' * (1 + len(args)))})"
        query = f"SELECT CAST(printf{call} AS BLOB), typeof(printf{call}), CAST(format{call} AS BLOB)"
        mine = bounded.execute(query, (form, *args) * 3).fetchone()
        if _repeats_past(_format_text(form), tuple(args), LIMIT, plain):
            assert mine == (None, b"null", None)  # SQLite's answer too, after seconds of repeating: not asked
            return
        sqlites = plain.execute(query, (form, *args) * 3).fetchone()
        assert (mine[0], mine[2]) == (sqlites[0], sqlites[2])
        try:
            (sqlites[0] or b"").decode("utf-8")
        except UnicodeDecodeError:  # no UTF-8 (a blob printed with %s): the same bytes, as a blob
            assert mine[1] == b"blob"
        else:
            assert mine[1] == sqlites[1]
    finally:
        plain.close()
        bounded.close()


def test_a_format_given_as_a_blob_or_cut_by_a_nul_or_none_at_all_is_read_as_sqlite_reads_it():
    """A blob format skipped the bound (15 s past a 1 s limit), a NUL before a %c was read past
    (NULL where SQLite says 'a'), and printf() with no argument raised (SQLite says NULL)."""
    with sqlite3.connect(":memory:") as conn:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
        bound_printf(conn, LIMIT)
        assert conn.execute("SELECT printf(CAST('%.*c' AS BLOB), 2000000000, 'x'), printf('a' || char(0) || '%.*c', "
                            "20000, 'x'), printf(), format()").fetchone() == (None, "a", None, None)
    with sqlite3.connect(":memory:") as probe:
        assert _repeats_past(_format_text(b"%.*c"), (LIMIT + 1, "x"), LIMIT, probe)
        assert not _repeats_past(_format_text("a\0%.*c"), (LIMIT + 1, "x"), LIMIT, probe)


def test_every_query_path_answers_null_for_a_repeat_past_the_length_limit(tmp_path, monkeypatch):
    """ledger sql (read_only_query) and Case.query: NULL, as SQLite's printf answers after seconds of
    repeating; the case's own connection answers printf as SQLite does after the query, and writes."""
    from ledger.storage import bounded_printf

    looked_at = []
    monkeypatch.setattr(bounded_printf, "_repeats_past", lambda form, args, limit, probe: looked_at.append(
        (form, limit)) or _repeats_past(form, args, limit, probe))
    case = start_case(tmp_path / "case")
    try:
        huge = "SELECT printf('%.*c', 2000000000, 'x') IS NULL AS n, format('%.*c', 3, 'y') AS y"
        assert read_only_query(tmp_path / "case", huge)[1] == [(1, "yyy")]
        assert case.query(huge) == [{"n": 1, "y": "yyy"}]
        assert looked_at == [("%.*c", 64 * 1024 * 1024)] * 4  # both calls of both queries, at the values' limit
        assert case.storage.conn.execute("SELECT printf('%.*c|%5.1f', 4, 'z', 2.25)").fetchone() == ("zzzz|  2.3",)
        case.transition("BLOCKED")
        assert case.status()["state"] == "BLOCKED"
    finally:
        case.close()
