"""The identifier rule (memory.validation): Unicode letters, marks and digits, `_ . : @ + -` and single inner spaces,
a letter, digit or `_` first, NFKC form, length in code points; each forbidden class refused with its own reason;
the OpenAPI schema's pattern a strict subset of it (every character it admits is accepted, and so is every id a
generator draws from it); cache keys built from such ids stay ASCII."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_admin.derived.caches import fact_key
from memory_admin.memory import validation
from memory_admin.memory.errors import InvalidInput

ACCEPTED = [
    "佐藤 花子",
    "株式会社あおば出版",
    "提出期限",
    "契約プラン",
    "〇〇商事",  # U+3007, a number (Nl) used as a kanji
    "task-proposal-017",
    "user:alice@example.com",
    "café",
    "Ελληνικά",
    "नमस्ते",  # Devanagari: letters with combining marks after them
    "_private",
    "a b c",
]

# (value, what the reason says): one per forbidden class.
REFUSED = [
    ("bell\x07", "Control characters"),
    ("line\nbreak", "Control characters"),
    ("del\x7f", "Control characters"),
    ("zero\u200bwidth", "Invisible formatting"),
    ("\ufeffbom", "Invisible formatting"),
    ("joiner\u200dx", "Invisible formatting"),
    ("soft\u00adhyphen", "Invisible formatting"),
    ("葛\U000e0100", "Invisible formatting"),  # an ideographic variation selector: a letter that looks the same
    ("a\u034fb", "Invisible formatting"),  # the combining grapheme joiner
    ("bidi\u202eevil", "Bidirectional control"),
    ("rtl\u200fmark", "Bidirectional control"),
    ("isolate\u2066x", "Bidirectional control"),
    ("two  spaces", "No two spaces"),
    (" leading", "No leading space"),
    ("trailing ", "No trailing space"),
    ("\u0301first", "combining mark cannot start"),
    ("a \u0301", "combining mark cannot start the identifier or follow a space"),
    ("-rf", "Start with a letter"),
    (".hidden", "Start with a letter"),
    ("a/b", "is not allowed"),
    ("a\\b", "is not allowed"),
    ("quote'd", "is not allowed"),
    ("ジョン・スミス", "is not allowed"),  # U+30FB KATAKANA MIDDLE DOT is punctuation
    ("emoji\U0001f600", "is not allowed"),
    ("private\ue000", "private-use"),
    ("nbsp\u00a0x", "Only the ordinary space"),  # (a door turns it into a space first: NFKC)
    ("\uff50\uff52\uff4f\uff4a\uff45\uff43\uff54", "NFKC form, 'project'"),
    ("e\u0301", "NFKC form, 'é'"),
]


@pytest.mark.parametrize("value", ACCEPTED)
def test_letters_marks_digits_and_single_inner_spaces_are_accepted(value):
    assert validation.identifier_problems(value, 200) == []
    assert validation.is_identifier(value, 200)


@pytest.mark.parametrize(("value", "reason"), REFUSED)
def test_each_forbidden_class_is_refused_with_its_reason(value, reason):
    problems = validation.identifier_problems(value, 200)
    assert len(problems) == 1 and reason in problems[0], problems
    assert not validation.is_identifier(value, 200)
    with pytest.raises(InvalidInput) as refused:
        validation.check_identifiers(subject_id=value)
    assert reason in refused.value.extra["errors"]["subject_id"][0]


def test_a_refusal_names_an_invisible_character_by_code_point_and_never_echoes_it():
    (problem,) = validation.identifier_problems("ab\u202ecd", 200)
    assert "U+202E RIGHT-TO-LEFT OVERRIDE at position 3" in problem
    assert "\u202e" not in problem


def test_the_length_is_counted_in_code_points():
    # 100 ideographs are 300 bytes of UTF-8: still 100 characters.
    assert validation.identifier_problems("佐" * 100, 100) == []
    assert validation.identifier_problems("佐" * 101, 100) == ["At most 100 characters (code points); this has 101."]
    assert validation.identifier_problems("𠮷" * 100, 100) == []  # outside the BMP: one code point each


def test_blank_and_non_strings_are_required():
    for value in ("", "   ", None, 17, ["a"]):
        assert validation.identifier_problems(value, 100) == ["This field is required and may not be blank."]


def test_nfkc_makes_fullwidth_and_compatibility_forms_one_key():
    assert validation.normalize_identifier("\uff50\uff52\uff4f\uff4a\uff45\uff43\uff54\uff0d\uff41") == "project-a"
    assert validation.normalize_identifier("佐藤\u3000花子") == "佐藤 花子"  # the ideographic space
    assert (
        validation.normalize_identifier("\uff76\uff9e\uff72\uff84\uff9e") == "ガイド"
    )  # halfwidth katakana with its voicing mark
    assert validation.normalize_identifier("㈱あおば") == "(株)あおば"  # and then refused: parentheses
    assert validation.identifier_problems(validation.normalize_identifier("㈱あおば"), 100)
    assert validation.normalize_identifier(None) is None


def test_the_schema_pattern_compiles_in_python_as_in_ecma_262():
    # `\uXXXX` and `(?:...)` mean the same in both dialects; the pattern is ASCII, so it travels in any JSON.
    assert validation.IDENTIFIER_PATTERN.isascii()
    re.compile(validation.IDENTIFIER_PATTERN)


def _pattern_classes() -> tuple[set[str], set[str]]:
    start, rest = re.match(r"\^\[(.*?)\]\[(.*?)\]\*", validation.IDENTIFIER_PATTERN).groups()  # type: ignore[union-attr]
    first, following = re.compile(f"[{start}]"), re.compile(f"[{rest}]")
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return {c for c in chars if first.fullmatch(c)}, {c for c in chars if following.fullmatch(c)}


def test_every_character_the_schema_pattern_admits_is_accepted_first_and_after_another():
    first, following = _pattern_classes()
    assert {"A", "_", "佐", "あ", "ア", "ー", "々", "é"} <= first and "-" not in first
    assert following >= first | set(".:@+-")
    for ch in first:
        assert validation.identifier_problems(ch, 10) == [], unicodedata.name(ch, hex(ord(ch)))
    for ch in following:
        assert validation.identifier_problems("a" + ch, 10) == [], unicodedata.name(ch, hex(ord(ch)))
        assert unicodedata.normalize("NFKC", ch) == ch


@settings(max_examples=300, deadline=None, database=None)
@given(st.from_regex(validation.IDENTIFIER_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 200))
def test_every_id_generated_from_the_schema_pattern_is_accepted(value):
    assert validation.identifier_problems(value, 200) == []


def test_a_cache_key_for_japanese_ids_is_ascii_and_tells_them_apart():
    key = fact_key(1, "P", "佐藤 花子", "提出期限")
    assert key.isascii() and re.fullmatch(r"fact:v[0-9]+:[0-9a-f]{64}", key)
    assert key != fact_key(1, "P", "佐藤花子", "提出期限")
    assert key != fact_key(1, "P", "佐藤 花子", "提出 期限")
