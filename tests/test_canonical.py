"""SPEC 4: canonical JSON (RFC 8785 via the rfc8785 package) and hashing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from ledger.canonical import canonical_bytes, canonical_sha256, check_int, check_json_value, parse_json
from ledger.errors import INVALID_ARGUMENT, INVALID_JSON, LedgerError


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
def test_event_bodies_assembled_from_members_equal_rfc8785_output(body):
    import rfc8785

    from ledger.canonical import canonical_event_bytes

    try:
        expected = rfc8785.dumps(body)
    except Exception:
        with pytest.raises(LedgerError):
            canonical_event_bytes(body)
        return
    assert canonical_event_bytes(body) == expected
    assert canonical_event_bytes(body) == expected  # second time from the cache


def test_cached_members_keep_true_and_one_apart():
    from ledger.canonical import canonical_event_bytes

    assert canonical_event_bytes({"a": [{"x": 1}]}) == b'{"a":[{"x":1}]}'
    assert canonical_event_bytes({"a": [{"x": True}]}) == b'{"a":[{"x":true}]}'
    assert canonical_event_bytes({"\uff21": 1, "\U00010000": [{"k": "v"}]}) == canonical_bytes(
        {"\uff21": 1, "\U00010000": [{"k": "v"}]})
