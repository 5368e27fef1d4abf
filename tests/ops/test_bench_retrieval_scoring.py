"""The retrieval benchmark's arithmetic (bench/retrieval.py): recall@1, recall@5, MRR, slices and stale-in-top-5 on
a tiny fixture whose figures are worked out by hand, and its data set's shape, so the bench cannot silently report
wrong figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import retrieval
from bench.retrieval import rank_of, score, slice_of, stale_in_top


def test_rank_is_the_first_place_of_the_facts_key() -> None:
    keys = [("acme", "plan"), ("acme", "renewal_date"), ("acme", "plan")]
    assert rank_of(keys, ("acme", "plan")) == 1
    assert rank_of(keys, ("acme", "renewal_date")) == 2
    assert rank_of(keys, ("globex", "plan")) is None
    assert rank_of([], ("acme", "plan")) is None


def test_recall_and_mrr_match_the_hand_computed_figures() -> None:
    # Ranks 1, 2, 5, 6 and absent: recall@1 1/5, recall@5 3/5, MRR (1 + 1/2 + 1/5 + 1/6 + 0) / 5.
    scores = score([1, 2, 5, 6, None])
    assert scores.n == 5
    assert scores.recall_at_1 == pytest.approx(0.2)
    assert scores.recall_at_5 == pytest.approx(0.6)
    assert scores.mrr == pytest.approx((1 + 1 / 2 + 1 / 5 + 1 / 6) / 5)


def test_all_found_first_scores_one_and_nothing_found_scores_zero() -> None:
    assert score([1, 1, 1]) == retrieval.Scores(3, 1.0, 1.0, 1.0)
    assert score([None, None]) == retrieval.Scores(2, 0.0, 0.0, 0.0)


def test_an_empty_slice_scores_nan_rather_than_zero() -> None:
    empty = score([])
    assert empty.n == 0
    assert math.isnan(empty.recall_at_1) and math.isnan(empty.recall_at_5) and math.isnan(empty.mrr)
    assert retrieval.fmt(empty.mrr) == "-"


def test_slices_split_by_the_question_and_fact_languages() -> None:
    assert slice_of("en", "en") == "en"
    assert slice_of("ja", "ja") == "ja"
    assert slice_of("ja", "en") == "cross"
    assert slice_of("en", "ja") == "cross"


def test_stale_in_top_5_counts_superseded_and_unusable_hits_in_the_first_five_only() -> None:
    results: list[dict[str, Any]] = [
        {"memory_id": "mem-new", "usable": True},
        {"memory_id": "mem-old", "usable": True},  # superseded, whatever the flag says
        {"memory_id": "mem-held", "usable": False},
        {"memory_id": "mem-a", "usable": True},
        {"memory_id": "mem-b"},
        {"memory_id": "mem-old-2", "usable": True},  # sixth: outside the top 5
    ]
    assert stale_in_top(results, {"mem-old", "mem-old-2"}) == 2
    assert stale_in_top(results[:1], {"mem-old"}) == 0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert retrieval.percentile(values, 50) == 50.0
    assert retrieval.percentile(values, 95) == 95.0
    assert math.isnan(retrieval.percentile([], 95))


def test_evaluate_scores_every_question_once_and_each_in_its_slice() -> None:
    facts = {
        "F1": retrieval.Fact("F1", "acme", "plan", "Enterprise", "en"),
        "F2": retrieval.Fact("F2", "佐藤 花子", "提出期限", "2026年11月2日", "ja", old="2026年10月22日"),
    }
    questions = [
        retrieval.Question("Q1", "F1", "en", "What subscription does ACME have?"),
        retrieval.Question("Q2", "F2", "ja", "佐藤さんの締め切りはいつ"),
        retrieval.Question("Q3", "F2", "en", "When is Hanako Sato's submission due?"),
    ]
    asked = retrieval.Asked(ranks={"Q1": 1, "Q2": 2, "Q3": None})
    overall, slices = retrieval.evaluate(asked, questions, facts)
    assert overall == score([1, 2, None])
    assert slices["en"] == score([1]) and slices["ja"] == score([2]) and slices["cross"] == score([None])


def test_the_shipped_data_set_has_its_promised_shape(tmp_path: Path) -> None:
    facts, questions = retrieval.load_data(retrieval.DATA_DIR / "facts.jsonl", retrieval.DATA_DIR / "questions.jsonl")
    assert len(facts) >= 200 and len(questions) >= 200
    assert sum(1 for f in facts.values() if f.old is not None) >= 20
    assert {q.lang for q in questions} == {"en", "ja"}
    assert {slice_of(q.lang, facts[q.fact].lang) for q in questions} == {"en", "ja", "cross"}
    subjects: dict[str, int] = {}
    for fact in facts.values():
        subjects[fact.subject] = subjects.get(fact.subject, 0) + 1
    assert min(subjects.values()) >= 3  # several facts per subject: the name alone does not find the answer
    # A question naming an unknown fact is refused rather than scored as a miss.
    bad = tmp_path / "questions.jsonl"
    bad.write_text(json.dumps({"id": "Q1", "fact": "F999", "lang": "en", "q": "?"}) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        retrieval.load_data(retrieval.DATA_DIR / "facts.jsonl", bad)
