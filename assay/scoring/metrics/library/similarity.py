"""Similarity of the output to a reference, with the libraries that define the measures:
Levenshtein ratio (rapidfuzz), sentence BLEU and chrF (sacrebleu), ROUGE-L (rouge-score).

Each scores 0-1 and keeps the library's raw value in the details. ``reference`` defaults to the
item's expected; a list of references is allowed (BLEU and chrF use them all, as multi-reference
scores; Levenshtein and ROUGE-L take the best match).

The libraries are imported when a metric is built, not when it is registered: sacrebleu and
rouge-score (with nltk) take most of a second to import, which every process that only resolves
suites would pay.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from assay.scoring.metrics.library._common import (
    EXPECTED,
    KINDS,
    Args,
    as_text,
    output_text,
)
from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    metric,
    resolve_arg,
)
from assay.scoring.metrics.work import Work, WorkBound


class ReferenceArgs(Args):
    reference: str | list[str] | ItemRef = Field(
        EXPECTED, description="the reference text or texts; default: the item's expected"
    )

    @field_validator("reference")
    @classmethod
    def _some_reference(cls, value: str | list[str] | ItemRef) -> str | list[str] | ItemRef:
        if isinstance(value, list) and not value:
            raise ValueError("give at least one reference")
        return value


def _references(args: ReferenceArgs, item: Any) -> list[str]:
    value = resolve_arg(args.reference, item)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise BadItemValue(f"{args.reference} must be a string or a non-empty list of strings, got {as_text(value)[:200]}")


def _references_sizes(args: ReferenceArgs, item: Any) -> tuple[list[str], str]:
    references = _references(args, item)
    return references, f"{len(references):,} reference{'s' if len(references) != 1 else ''}"


# --- Levenshtein ---------------------------------------------------------------------------------

# rapidfuzz compares each reference with the output 64 characters at a time: about 0.8 s for 200,000 x
# 200,000 characters.
MAX_CHAR_PAIRS = 40_000_000_000


def _char_pairs(args: ReferenceArgs, item: Any) -> Work:
    references, count = _references_sizes(args, item)
    output, reference_chars = len(output_text(item)), sum(map(len, references))
    return Work(output * reference_chars, f"{output:,} output characters x {reference_chars:,} reference characters ({count})")


class LevenshteinArgs(ReferenceArgs):
    case_sensitive: bool = True


@metric(
    "levenshtein_ratio",
    version=1,
    kinds=KINDS,
    args_model=LevenshteinArgs,
    bounds=(WorkBound("character pairs", MAX_CHAR_PAIRS, _char_pairs),),
)
def levenshtein_ratio(args: LevenshteinArgs) -> Metric:
    """rapidfuzz ``fuzz.ratio`` / 100: the normalised Indel similarity (python-Levenshtein's
    ``ratio``); ``ratio`` in the details is rapidfuzz's 0-100 value."""

    from rapidfuzz import fuzz

    def fold(text: str) -> str:
        return text if args.case_sensitive else text.casefold()

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        output = fold(output_text(item))
        ratio = max(fuzz.ratio(output, fold(ref)) for ref in _references(args, item))
        return ComponentResult.ok(ratio / 100.0, {"ratio": ratio})

    return score


# --- BLEU and chrF -------------------------------------------------------------------------------


# sacrebleu counts the n-grams of the output against each reference in Python: about a second per
# 1.7 million characters for chrF (chrF++ and BLEU are in the same range or faster).
MAX_NGRAM_CHARS = 1_200_000


def _ngram_chars(args: ReferenceArgs, item: Any) -> Work:
    references, count = _references_sizes(args, item)
    output, reference_chars = len(output_text(item)), sum(map(len, references))
    return Work(
        output * len(references) + reference_chars,
        f"{output:,} output characters x {count} + {reference_chars:,} reference characters",
    )


NGRAM_BOUND = WorkBound("characters counted", MAX_NGRAM_CHARS, _ngram_chars)


class BleuArgs(ReferenceArgs):
    # The sacrebleu tokenizers that need no extra download or package.
    tokenize: Literal["13a", "intl", "char", "zh", "none"] = "13a"
    lowercase: bool = False


@metric("bleu", version=1, kinds=KINDS, args_model=BleuArgs, bounds=(NGRAM_BOUND,))
def bleu(args: BleuArgs) -> Metric:
    """sacrebleu's sentence BLEU (exponential smoothing, effective order, as sacrebleu recommends
    for single sentences) / 100; ``bleu`` is sacrebleu's 0-100 score."""
    from sacrebleu.metrics import BLEU

    scorer = BLEU(tokenize=args.tokenize, lowercase=args.lowercase, effective_order=True)

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        result = scorer.sentence_score(output_text(item), _references(args, item))
        details = {"bleu": result.score, "precisions": result.precisions, "brevity_penalty": result.bp}
        return ComponentResult.ok(result.score / 100.0, details)

    return score


class ChrfArgs(ReferenceArgs):
    word_order: Literal[0, 2] = Field(0, description="0: chrF; 2: chrF++ (adds word bigrams)")
    lowercase: bool = False
    eps_smoothing: bool = Field(False, description="sacrebleu's eps_smoothing (the chrF++.py / NLTK behaviour)")


@metric("chrf", version=1, kinds=KINDS, args_model=ChrfArgs, bounds=(NGRAM_BOUND,))
def chrf(args: ChrfArgs) -> Metric:
    """sacrebleu's sentence chrF (character 6-grams, beta 2) / 100; ``chrf`` is its 0-100 score."""
    from sacrebleu.metrics import CHRF

    scorer = CHRF(word_order=args.word_order, lowercase=args.lowercase, eps_smoothing=args.eps_smoothing)

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        result = scorer.sentence_score(output_text(item), _references(args, item))
        return ComponentResult.ok(result.score / 100.0, {"chrf": result.score})

    return score


# --- ROUGE-L -------------------------------------------------------------------------------------


# rouge-score computes the LCS with a pure-Python table of output x reference tokens for each
# reference (about 6 million cells a second): past this many cells in all an item would hold a worker
# for seconds to minutes.
MAX_LCS_CELLS = 4_000_000


def _lcs_cells(args: ReferenceArgs, item: Any) -> Work:
    from rouge_score.tokenizers import DefaultTokenizer

    # Stemming never changes how many tokens there are, so the count skips it.
    tokenize = DefaultTokenizer(use_stemmer=False).tokenize
    references, count = _references_sizes(args, item)
    output, reference_tokens = len(tokenize(output_text(item))), sum(len(tokenize(ref)) for ref in references)
    return Work(output * reference_tokens, f"{output:,} output tokens x {reference_tokens:,} reference tokens ({count})")


class RougeArgs(ReferenceArgs):
    use_stemmer: bool = Field(False, description="rouge-score's Porter stemmer (English)")


@metric(
    "rouge_l",
    version=1,
    kinds=KINDS,
    args_model=RougeArgs,
    bounds=(WorkBound("LCS cells", MAX_LCS_CELLS, _lcs_cells, hint="use chrf or levenshtein_ratio for long texts"),),
)
def rouge_l(args: RougeArgs) -> Metric:
    """rouge-score's ROUGE-L F-measure (longest common subsequence of tokens); precision, recall
    and fmeasure in the details. rouge-score's tokenizer lowercases and keeps only ASCII letters and
    digits, so a reference with none of them cannot be scored (failed, with that reason). An item
    whose LCS tables would exceed ``MAX_LCS_CELLS`` in all (output tokens x reference tokens, summed
    over the references; about 2,000 x 2,000) fails with the sizes rather than hold the worker."""
    from rouge_score.rouge_scorer import RougeScorer
    from rouge_score.tokenizers import DefaultTokenizer

    tokenizer = DefaultTokenizer(use_stemmer=args.use_stemmer)
    scorer = RougeScorer(["rougeL"], tokenizer=tokenizer)

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        references = _references(args, item)
        if not any(tokenizer.tokenize(ref) for ref in references):
            raise BadItemValue(
                "the reference has no ASCII letters or digits, the only tokens rouge-score's tokenizer keeps; "
                "use chrf or levenshtein_ratio for this text"
            )
        # rouge-score takes the target (reference) first, then the prediction.
        result = scorer.score_multi(references, output_text(item))["rougeL"]
        details = {"precision": result.precision, "recall": result.recall, "fmeasure": result.fmeasure}
        return ComponentResult.ok(result.fmeasure, details)

    return score
