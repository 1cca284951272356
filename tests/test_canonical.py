"""docs/concepts.md: canonical JSON (RFC 8785 via the rfc8785 package) and hashing."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, strategies as st

from ledger.ground.canonical import canonical_bytes, canonical_sha256, check_int, check_json_value, parse_json
from ledger.ground.errors import INVALID_ARGUMENT, INVALID_JSON, LedgerError


def test_keys_outside_the_bmp_sort_by_utf16_code_units():
    # U+10000 is D800 DC00 in UTF-16, which sorts before U+FF21
    assert canonical_bytes({"\U00010000": 1, "\uff21": 2}) == '{"\U00010000":1,"\uff21":2}'.encode()
    assert canonical_bytes({"\uff21": 2, "\U00010000": 1}) == '{"\U00010000":1,"\uff21":2}'.encode()


@pytest.mark.parametrize("value, text", [
    (10.0, b"10"),
    (-0.0, b"0"),
    (1e21, b"1e+21"),
    (1e-7, b"1e-7"),
    (0.1, b"0.1"),
    (2**53 - 1, b"9007199254740991"),
    (-(2**53 - 1), b"-9007199254740991"),
    ("\u00e9\n", '"\u00e9\\n"'.encode()),
    ({"b": [1, {"d": 1, "c": 2}], "a": None}, b'{"a":null,"b":[1,{"c":2,"d":1}]}'),
])
def test_numbers_and_strings_take_their_canonical_spelling(value, text):
    assert canonical_bytes(value) == text


@pytest.mark.parametrize("value", [
    math.nan, math.inf, -math.inf, 2**53, -(2**53), 10**30, {1: "x"}, "\ud800", {"\udc00": 1},
    b"bytes", {1.5: 2}, object(),
])
def test_values_without_a_canonical_form_are_invalid_json(value):
    with pytest.raises(LedgerError) as caught:
        canonical_bytes(value)
    assert caught.value.code == INVALID_JSON


@pytest.mark.parametrize("text", [
    '{"a": NaN}', '{"a": Infinity}', '[-Infinity]', '{"a": 1, "a": 2}', '"\\ud800"',
    '9007199254740992', '{"a":', "", "\xff",
])
def test_parsing_refuses_text_with_no_canonical_form(text):
    with pytest.raises(LedgerError) as caught:
        parse_json(text)
    assert caught.value.code == INVALID_JSON


@pytest.mark.parametrize("text", ["1e16", "-9007199254740992.0", "[1e20]"])
def test_floats_that_would_read_back_as_huge_integers_are_invalid_json(text):
    with pytest.raises(LedgerError) as caught:
        parse_json(text)
    assert caught.value.code == INVALID_JSON
    with pytest.raises(LedgerError):
        check_json_value([float(text.strip("[]"))])


@pytest.mark.parametrize("text, canonical", [("1e21", b"1e+21"), ("1000000000000000000000.0", b"1e+21"),
                                             ("-1.5e300", b"-1.5e+300"), ("9007199254740991.0", b"9007199254740991")])
def test_a_number_whose_canonical_form_reads_back_as_written_is_kept_whatever_its_size(text, canonical):
    """From 1e21 on, RFC 8785 writes a double in exponent form, which reads back as the same number:
    nothing to refuse (docs/errors.md, INVALID_JSON), where 1e16 would come back as an integer."""
    assert canonical_bytes(parse_json(text)) == canonical


@pytest.mark.parametrize("digits", [17, 4300, 4301, 100_000])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_an_integer_of_any_number_of_digits_past_the_safe_range_is_refused_naming_its_place(digits, as_bytes):
    """Python refuses to read an integer of more than 4,300 digits; the refusal is still ours."""
    for sign in ("", "-"):
        text = '{"a": [1, {"units": %s%s}]}' % (sign, "9" * digits)
        with pytest.raises(LedgerError) as caught:
            parse_json(text.encode() if as_bytes else text)
        assert caught.value.code == INVALID_JSON
        number = sign + "9" * digits  # shown whole up to 80 characters, else its start and end, the rest counted
        shown = number if len(number) <= 80 else f"{number[:26]} … ({len(number) - 39} characters left out) … {number[-13:]}"
        assert caught.value.message == (f"integer {shown} at $.a[1].units is outside "
                                        "±(2**53-1); a field that takes a number (units, costs, limits) takes none "
                                        "larger; in free-form data (evidence) send a larger number as a string")


def test_a_large_integer_in_a_where_value_is_pointed_to_the_integer_form_the_lookup_takes():
    """Elsewhere a string is the way to send it; a lookup's where value compares {"integer": digits}
    with the stored integer, where a string would match nothing."""
    request = {"actions": [{"args": {"where": {"snowflake": 2 ** 60}}}]}
    for call in (lambda: canonical_bytes(request, "request"), lambda: parse_json(json.dumps(request))):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_JSON and "actions[0].args.where.snowflake" in caught.value.message
        assert caught.value.message.endswith('send a larger number in a where value as {"integer": "<decimal digits>"}')
    for elsewhere in ({"whereabouts": {"x": 2 ** 60}}, {"evidence": {"where": {"x": 2 ** 60}}},
                      {"evidence": {"args": {"where": 2 ** 60}}}, {"myargs": {"where": {"x": 2 ** 60}}}):
        with pytest.raises(LedgerError) as caught:
            canonical_bytes(elsewhere, "request")
        assert caught.value.message.endswith("send a larger number as a string"), elsewhere


def test_json_bytes_are_utf8_only_never_utf16_or_utf32_guessed_from_the_bytes():
    assert parse_json('{"a": "\u00e9"}'.encode("utf-8")) == {"a": "\u00e9"}
    assert parse_json(b"\xef\xbb\xbf[1]") == [1]  # a byte-order mark is skipped
    for encoding in ("utf-16", "utf-32"):  # with their byte-order marks, which are no UTF-8
        with pytest.raises(LedgerError) as caught:
            parse_json('{"a": 1}'.encode(encoding))
        assert caught.value.code == INVALID_JSON and caught.value.message == "not UTF-8 (byte 1: invalid start byte)"
    with pytest.raises(LedgerError) as caught:  # without one: UTF-8 text of NULs, which is no JSON
        parse_json('{"a": 1}'.encode("utf-16-le"))
    assert caught.value.code == INVALID_JSON
    with pytest.raises(LedgerError) as caught:
        parse_json(b'{"a": "\xff"}')
    assert caught.value.message == "not UTF-8 (byte 8: invalid start byte)"


def test_deep_nesting_is_invalid_json_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(LedgerError) as caught:
        parse_json(deep)
    assert caught.value.code == INVALID_JSON


def test_evidence_differing_only_in_key_order_or_number_spelling_hashes_the_same():
    assert canonical_sha256({"a": 1, "b": 2.0}) == canonical_sha256({"b": 2, "a": 1.0})
    assert canonical_sha256(parse_json('{"x": 1e2}')) == canonical_sha256(parse_json('{"x": 100}'))
    assert canonical_sha256({"a": 1}) != canonical_sha256({"a": 2})


@pytest.mark.parametrize("value", [True, False, 25.0, "1", None])
def test_bool_float_and_other_types_are_never_accepted_as_integers(value):
    with pytest.raises(LedgerError) as caught:
        check_int(value, "units")
    assert caught.value.code == INVALID_ARGUMENT


def test_integers_are_checked_against_the_safe_range():
    assert check_int(2**53 - 1, "units") == 2**53 - 1
    with pytest.raises(LedgerError):
        check_int(2**53, "units")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_bytes_are_a_fixed_point_of_parse_and_canonicalize(value):
    try:
        check_json_value(value)
    except LedgerError:
        return  # refused up front: such values never reach storage
    data = canonical_bytes(value)
    assert canonical_bytes(parse_json(data)) == data


scalars = st.none() | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(max_size=6) | st.booleans()
bodies = st.dictionaries(
    st.text(max_size=6),
    json_values | st.lists(st.dictionaries(st.text(max_size=5), scalars, max_size=5), max_size=4),
    max_size=6,
)


@given(bodies)
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_event_bodies_assembled_from_members_equal_rfc8785_output(body):
    import rfc8785

    from ledger.ground.canonical import canonical_event_bytes

    try:
        expected = rfc8785.dumps(body)
    except Exception:
        with pytest.raises(LedgerError):
            canonical_event_bytes(body)
        return
    assert canonical_event_bytes(body) == expected
    assert canonical_event_bytes(body) == expected  # second time from the cache


def test_cached_members_keep_true_and_one_apart():
    from ledger.ground.canonical import canonical_event_bytes

    assert canonical_event_bytes({"a": [{"x": 1}]}) == b'{"a":[{"x":1}]}'
    assert canonical_event_bytes({"a": [{"x": True}]}) == b'{"a":[{"x":true}]}'
    assert canonical_event_bytes({"\uff21": 1, "\U00010000": [{"k": "v"}]}) == canonical_bytes(
        {"\uff21": 1, "\U00010000": [{"k": "v"}]})


# --- the standard-library fast path equals rfc8785 ----------------------------------------
import rfc8785  # noqa: E402

from ledger.ground.canonical import _plain  # noqa: E402
#: Strings that exercise RFC 8785's string rules: every control character, quote, backslash,
#: DEL, the line separators, characters outside the BMP and lone surrogates.
EDGE_TEXT = st.text(alphabet=st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x7F),
    st.sampled_from(["\u2028", "\u2029", "\u0085", "\ufeff", "\uffff", "\U0001f600", "\U00010000",
                     "\ud800", "\udfff", "\uff21", "\u00e9"]),
    st.characters(),
), max_size=12)
EDGE_INTS = st.one_of(st.integers(-(2**53 - 1), 2**53 - 1), st.sampled_from([2**53, -(2**53), 2**63, -(2**53 - 1)]))
EDGE_SCALARS = st.one_of(st.none(), st.booleans(), EDGE_INTS, EDGE_TEXT,
                         st.floats(allow_nan=True, allow_infinity=True))
EDGE_VALUES = st.recursive(
    EDGE_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(EDGE_TEXT, children, max_size=4)),
    max_leaves=20,
)


def _rfc8785_or_refusal(value):
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError, RecursionError):
        return "refused"


def _ours_or_refusal(value):
    try:
        return canonical_bytes(value)
    except LedgerError as exc:
        assert exc.code == INVALID_JSON
        return "refused"


@given(EDGE_VALUES)
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_json_dumps_fast_path_gives_exactly_the_rfc8785_bytes_or_the_same_refusal(value):
    assert _ours_or_refusal(value) == _rfc8785_or_refusal(value)


@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**53 - 1), 2**53 - 1),
                              st.text(alphabet=st.characters(exclude_categories=("Cs",)))),
                    lambda c: st.one_of(st.lists(c, max_size=4),
                                        st.dictionaries(st.text(alphabet=st.characters(max_codepoint=0x7F)), c,
                                                        max_size=4)),
                    max_leaves=20))
def test_values_the_ledger_builds_take_the_fast_path_and_match_rfc8785(value):
    assert _plain(value)
    assert canonical_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [1.0, {"\u00e9": 1}, {"\U00010000": 1}, 2**53, True and 1.5, [0.1]])
def test_floats_non_ascii_keys_and_big_integers_leave_the_fast_path(value):
    assert not _plain(value)


@pytest.mark.parametrize("text", ["[1e400]", '{"x": -1E309}', "[123456789012345678901234567890e300]"])
def test_a_number_too_large_for_a_double_is_refused_while_parsing(text):
    with pytest.raises(LedgerError) as caught:
        parse_json(text)
    assert caught.value.code == "INVALID_JSON" and "too large for a double" in caught.value.message


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
                    max_leaves=20))
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_parsing_with_or_without_the_integer_hook_gives_the_same_value_or_refusal(value):
    """Text without a 16-digit run skips the Python integer hook; the result must not change."""
    import json as stdlib_json

    from ledger.ground.canonical import _STRICT, _STRICT_SHORT_INTS

    text = stdlib_json.dumps(value)
    try:
        expected = ("ok", _STRICT.decode(text))
    except LedgerError as exc:
        expected = ("refused", exc.code)
    try:
        got = ("ok", parse_json(text))
    except LedgerError as exc:
        got = ("refused", exc.code)
    assert got == expected
    if not re.search(r"[0-9]{16}", text):
        assert ("ok", _STRICT_SHORT_INTS.decode(text)) == expected


def test_parse_json_of_something_that_is_not_text_is_invalid_json():
    from ledger.ground.canonical import parse_json
    with pytest.raises(LedgerError) as caught:
        parse_json(5)
    assert caught.value.code == "INVALID_JSON"


def test_evidence_nested_past_the_limit_is_invalid_json(budget):
    budget.reserve("H1", "a1", "source.read_context")
    deep = 0
    for _ in range(65):
        deep = [deep]
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", deep)
    assert caught.value.code == INVALID_JSON
    for _ in range(2):
        deep = deep[0]
    assert budget.record_result("H1", "a1", deep).action["novelty_score"] == 100


@pytest.mark.parametrize("text", ["1e-400", "-2e-324", "0.0001e-330"])
def test_a_number_that_underflows_to_zero_is_invalid_json_not_silently_zero(text):
    from ledger.ground.canonical import parse_json

    with pytest.raises(LedgerError) as caught:
        parse_json(text)
    assert caught.value.code == INVALID_JSON


@pytest.mark.parametrize("text, value", [("0.0", 0.0), ("0e5", 0.0), ("-0.0", 0.0), ("5e-324", 5e-324)])
def test_zeros_and_the_smallest_double_still_parse(text, value):
    from ledger.ground.canonical import parse_json

    assert parse_json(text) == value


@pytest.mark.parametrize("text, where, words", [
    ('{"temperature": 1e999}', "$.temperature", "too large for a double"),
    ('{"t": -1E+400}', "$.t", "too large for a double"),
    ('{"a": [1, {"b": 1e-400}]}', "$.a[1].b", "too small for a double"),
    ('{"id": 9007199254740993}', "$.id", "outside ±(2**53-1)"),
    ('[0, -9007199254740993]', "$[1]", "outside ±(2**53-1)"),
    ('{"x": {"n": 1e16}}', "$.x.n", "integer beyond ±(2**53-1)"),
    ('{"x": {"y": 1, "y": 2}}', "$.x", "duplicate object key 'y'"),
    ('{"v": [NaN]}', "$.v[0]", "NaN"),
    ('{"ok": 1.5, "list": [2, 3, Infinity]}', "$.list[2]", "Infinity"),
])
def test_every_number_or_key_the_parser_refuses_is_named_by_its_json_path(text, where, words):
    for given in (text, text.encode("utf-8")):
        with pytest.raises(LedgerError) as caught:
            parse_json(given)
        assert caught.value.code == "INVALID_JSON"
        assert f" at {where}" in caught.value.message and words in caught.value.message, caught.value.message


def test_a_journal_line_with_a_number_too_large_for_a_double_names_the_field(tmp_path):
    from ledger import Case, apply_journal

    with Case.create(tmp_path / "c", "BUG-1", at="2026-01-01T00:00:00Z") as case:
        results = list(apply_journal(case, ['{"op": "open_revision", "hypotheses": [{"statement": "s"}], '
                                       '"units_per_hypothesis": 10, "meta": {"temperature": 1e999}}'], keep_going=True))
    assert results[0].error.code == "INVALID_JSON"
    assert "$.meta.temperature" in results[0].error.message


@pytest.mark.parametrize("value, where", [({"a": [1, 1e16]}, "evidence.a[1]"), ({"t": float("inf")}, "evidence.t"),
                                          ({"x": {"y": 2**60}}, "evidence.x.y")])
def test_evidence_from_code_that_has_no_json_form_is_refused_naming_the_field(case, value, where):
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", value)
    assert caught.value.code == INVALID_JSON and f" at {where}" in caught.value.message, caught.value.message


@pytest.mark.parametrize("key, shown", [("\ud800", '["\\ud800"]'), ("a\x1b]0;x\x07", '["a\\u001b]0;x\\u0007"]'),
                                        ("two words", '["two words"]'), ("plain_key-1", ".plain_key-1")])
def test_a_refusal_names_an_odd_key_in_its_json_path_escaped_so_the_message_always_prints(key, shown):
    """The path of a refused value names its key JSON-escaped when it is not a plain name, so the
    message encodes as UTF-8 and shows no control character (a journal's result line carries it)."""
    with pytest.raises(LedgerError) as caught:
        parse_json(json.dumps({"outer": {key: 9007199254740992.0}}))
    assert caught.value.code == INVALID_JSON
    assert f"at $.outer{shown} " in caught.value.message
    caught.value.message.encode("utf-8")
    assert not any(ord(c) < 32 for c in caught.value.message)


@pytest.mark.parametrize("value, message", [
    ({"a": ["x", "\ud800"]}, "no canonical JSON form at evidence.a[1]: text holding a lone surrogate (no UTF-8 form)"),
    ({"a": {1: 2}}, "no canonical JSON form at evidence.a: an object key that is not a string (int '1')"),
    ({"\ud800": 1}, "no canonical JSON form at evidence: an object key holding a lone surrogate (no UTF-8 form)"),
    ({"k": b"x"}, "no canonical JSON form at evidence.k: a value of type bytes, which JSON does not have"),
    ([1, {2, 3}], "no canonical JSON form at evidence[1]: a value of type set, which JSON does not have"),
    # a type of another module is named with it: numpy's bool_ was "bool", as if a plain bool were refused
    ({"d": __import__("decimal").Decimal(1)}, "no canonical JSON form at evidence.d: a value of type "
                                               "decimal.Decimal, which JSON does not have"),
])
def test_a_value_with_no_json_form_is_refused_naming_where_and_what_it_is(value, message):
    with pytest.raises(LedgerError) as caught:
        canonical_bytes(value, "evidence")
    assert (caught.value.code, caught.value.message) == (INVALID_JSON, message)
