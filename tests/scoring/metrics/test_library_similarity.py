"""Similarity metrics, checked against the values each library documents or tests itself."""

from __future__ import annotations

import time

import pytest

from tests.scoring.metrics.library_items import args_error, score

# --- levenshtein_ratio -----------------------------------------------------------------------------


def test_levenshtein_ratio_matches_rapidfuzz_documentation() -> None:
    # rapidfuzz docs, fuzz.ratio: fuzz.ratio("this is a test", "this is a test!") -> 96.55172413793103
    # (https://rapidfuzz.github.io/RapidFuzz/Usage/fuzz.html#ratio)
    result = score("levenshtein_ratio", output="this is a test!", expected="this is a test")
    assert result.details["ratio"] == pytest.approx(96.55172413793103)
    assert result.score == pytest.approx(0.9655172413793103)


def test_levenshtein_ratio_options_and_several_references() -> None:
    assert score("levenshtein_ratio", output="Paris", expected="Paris").score == 1.0
    assert score("levenshtein_ratio", output="abc", expected="xyz").score == 0.0
    assert score("levenshtein_ratio", output="PARIS", expected="paris").score == 0.0
    assert score("levenshtein_ratio", {"case_sensitive": False}, output="PARIS", expected="paris").score == 1.0
    # Several references: the best one counts.
    assert score("levenshtein_ratio", {"reference": ["nope", "Paris"]}, output="Paris").score == 1.0


# --- bleu ------------------------------------------------------------------------------------------

# sacrebleu's own sentence-BLEU test (test/test_sentence_bleu.py, "Example taken from #98"):
# smooth 'exp', 13a tokenizer, effective order -> 8.493; tokenize 'char' -> 40.8759; 'none' -> 7.347.
SACREBLEU_REF = "producţia de zahăr brut se exprimă în zahăr alb;"
SACREBLEU_SYS = "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;"


@pytest.mark.parametrize(("tokenize", "expected"), [("13a", 8.493), ("char", 40.8759), ("none", 7.347), ("intl", 8.493)])
def test_bleu_matches_sacrebleus_sentence_bleu_tests(tokenize: str, expected: float) -> None:
    result = score("bleu", {"tokenize": tokenize}, output=SACREBLEU_SYS, expected=SACREBLEU_REF)
    assert result.details["bleu"] == pytest.approx(expected, abs=1e-3)
    assert result.score == pytest.approx(expected / 100, abs=1e-5)


def test_bleu_lowercase_matches_sacrebleus_test() -> None:
    # Same file: lowercase with the char tokenizer -> 42.0267.
    result = score("bleu", {"tokenize": "char", "lowercase": True}, output=SACREBLEU_SYS, expected=SACREBLEU_REF)
    assert result.details["bleu"] == pytest.approx(42.0267, abs=1e-3)


def test_bleu_identical_disjoint_and_details() -> None:
    same = score("bleu", output="The dog bit the man.", expected="The dog bit the man.")
    assert same.score == 1.0 and same.details["brevity_penalty"] == 1.0 and len(same.details["precisions"]) == 4
    # sacrebleu's test (#141): no n-gram in common -> 0.
    assert score("bleu", output="this is a cat", expected="okay thanks").score == 0.0


# --- chrf ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hypothesis", "reference", "expected"),
    [
        # sacrebleu's test/test_chrf.py, test_sentence_level_chrf (sentence_chrf with eps_smoothing=True).
        (
            "Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře.",
            "Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře.",
            39.14078509,
        ),
        (
            "Lapali po dechu, jejich životy skončily dřív, než skutečně začaly.",
            "Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, připomněli.",
            57.15704367,
        ),
    ],
)
def test_chrf_matches_sacrebleus_sentence_chrf_tests(hypothesis: str, reference: str, expected: float) -> None:
    result = score("chrf", {"eps_smoothing": True}, output=hypothesis, expected=reference)
    assert result.details["chrf"] == pytest.approx(expected, abs=1e-4)
    assert result.score == pytest.approx(expected / 100, abs=1e-6)


def test_chrf_identical_chrf_plus_plus_and_lowercase() -> None:
    assert score("chrf", output="Niemand hat die Absicht", expected="Niemand hat die Absicht").score == pytest.approx(1.0)
    hyp, ref = "The cat sat on the mat.", "The cat is on the mat."
    plain, plus = score("chrf", output=hyp, expected=ref), score("chrf", {"word_order": 2}, output=hyp, expected=ref)
    # chrF++ also counts word unigrams and bigrams, so the same pair scores differently.
    assert 0 < plain.score < 1 and 0 < plus.score < 1 and plus.score != pytest.approx(plain.score)
    assert score("chrf", {"lowercase": True}, output="HELLO", expected="hello").score == pytest.approx(1.0)
    assert "args.word_order: Input should be 0 or 2" in args_error("chrf", {"word_order": 1})


# --- rouge_l ---------------------------------------------------------------------------------------


def test_rouge_l_matches_rouge_scores_tests() -> None:
    # rouge-score's rouge_scorer_test.py, testRougeLConsecutive: target "testing one two",
    # prediction "testing one" -> precision 1, recall 2/3, F 4/5; testRougeLNonConsecutive likewise.
    for output in ("testing one", "testing two"):
        result = score("rouge_l", output=output, expected="testing one two")
        assert result.score == pytest.approx(0.8)
        assert result.details == {"precision": pytest.approx(1.0), "recall": pytest.approx(2 / 3), "fmeasure": pytest.approx(0.8)}


def test_rouge_l_on_rouge_scores_readme_example_with_the_stemmer() -> None:
    # rouge-score's README example: RougeScorer(['rouge1', 'rougeL'], use_stemmer=True).score(
    # 'The quick brown fox jumps over the lazy dog', 'The quick brown dog jumps on the log.').
    # The LCS is "the quick brown jump the" (5 tokens; "jumps" stems to "jump"): P 5/8, R 5/9.
    result = score(
        "rouge_l", {"use_stemmer": True}, output="The quick brown dog jumps on the log.", expected="The quick brown fox jumps over the lazy dog"
    )
    assert result.details == {"precision": pytest.approx(5 / 8), "recall": pytest.approx(5 / 9), "fmeasure": pytest.approx(10 / 17)}


def test_rouge_l_with_several_references_takes_the_best() -> None:
    # rouge-score's testRougeMultiple... score_multi(["first text", "first something"], "text first") -> rougeL 0.5.
    result = score("rouge_l", {"reference": ["first text", "first something"]}, output="text first")
    assert result.score == pytest.approx(0.5)


def test_rouge_l_cannot_score_a_reference_its_tokenizer_drops() -> None:
    result = score("rouge_l", output="你好世界", expected="你好世界")
    assert result.status == "failed" and "no ASCII letters or digits" in result.reason


def test_rouge_l_refuses_a_pair_too_long_for_its_quadratic_table() -> None:
    long_text = "word " * 2001
    # CPU time, not wall time: on a loaded machine the wall clock also counts other processes' turns.
    started = time.process_time()
    result = score("rouge_l", output=long_text, expected=long_text)
    assert time.process_time() - started < 1.0
    assert result.status == "failed"
    assert result.reason == (
        "too much work for one item: 2,001 output tokens x 2,001 reference tokens (1 reference) = 4,004,001 "
        "LCS cells, over the bound of 4,000,000 LCS cells per item; use chrf or levenshtein_ratio for long texts"
    )
    assert score("rouge_l", output="word " * 2000, expected="word " * 2000).score == 1.0  # exactly at the limit


# --- shared reference handling ---------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["levenshtein_ratio", "bleu", "chrf", "rouge_l"])
def test_similarity_without_a_reference_is_skipped_and_a_bad_one_fails(metric: str) -> None:
    skipped = score(metric, output="text")
    assert (skipped.status, skipped.reason) == ("skipped", "the item has no expected")
    failed = score(metric, {"reference": {"from": "metadata.refs"}}, output="text", metadata={"refs": [1, 2]})
    assert failed.status == "failed"
    assert failed.reason == "metadata.refs must be a string or a non-empty list of strings, got [1, 2]"
    assert f"component 'comp': metric '{metric}': args.reference" in args_error(metric, {"reference": []})
    assert "args.reference_text: Extra inputs are not permitted" in args_error(metric, {"reference_text": "x"})
