"""What a question asks for, read from its text and the dataset's column names.

Only the question is read here; the code is read by :mod:`assay.scoring.pandas.code`. Column
names mentioned in the question are found first (``hire_date`` also matches "hire date" and
``HireDate`` "hire date"; a trailing noun may be plural; a one-letter column must be quoted),
and their text is masked before keywords are looked for, so a column called ``total_sales`` does
not make the question ask for a sum.

The reading is conservative (issue 19): it takes what the words say explicitly and nothing they
merely resemble. An order is asked for by "sorted", "in alphabetical order", "descending",
"newest first"; "order" alone is a noun ("the order amount"). "Top 5" and "3 highest" are
rankings; "at least one" and "at most 5" are conditions, neither a ranking nor an extreme. A
superlative without a number ("highest") asks for an extreme, not a sort. A column mentioned to
say that it does not matter ("all statuses", "whatever the status", "regardless of status") is
not required. A join is asked for by "join" / "merge", or by columns that only different tables
hold. Filter phrases say that the answer is filtered, not how many conditions it has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "fifty": 50, "hundred": 100,
}
_NUM = r"(\d+|" + "|".join(NUMBER_WORDS) + r")"

# Statistical operations a question can ask for (the pandas code-generation design, 1.3), by keyword.
STAT_KEYWORDS: dict[str, str] = {
    "mean": r"\b(mean|average|avg|averages|averaged)\b",
    "sum": r"\b(sum|sums|total|totals|summed|add up|combined amount)\b",
    "max": r"(?<!at )\b(max|maximum|highest|largest|biggest|greatest|most|peak|top|oldest|latest|newest|most recent)\b(?!\s+" + _NUM + r"\b)",
    "min": r"(?<!at )\b(min|minimum|lowest|smallest|least|fewest|cheapest|bottom|youngest|earliest)\b(?!\s+" + _NUM + r"\b)",
    "count": r"\b(count|counts|how many|number of|frequency|frequencies|tally)\b",
    "median": r"\bmedian\b",
    "std": r"\b(standard deviation|std|stdev|variance)\b",
    "nunique": r"\b(distinct|unique)\b",
}
# "at least 4" / "at most one" are conditions: "least" and "most" rank only after the number ("3 most").
TOP_N = re.compile(r"\b(top|largest|highest|biggest|greatest|best)\s+" + _NUM + r"\b|\b" + _NUM + r"\s+(largest|highest|biggest|greatest|best|most)\b")
BOTTOM_N = re.compile(r"\b(bottom|smallest|lowest|worst)\s+" + _NUM + r"\b|\b" + _NUM + r"\s+(smallest|lowest|least|worst|fewest)\b")
# One filter condition per phrase (the pandas code-generation design, 2.1): comparisons, ranges, exclusions, null tests.
CONDITION_PHRASES = re.compile(
    r"\b(greater than|more than|less than|fewer than|higher than|lower than|larger than|smaller than|bigger than|"
    r"at least|at most|no more than|no less than|not more than|not less than|above|below|exceeds?|exceeding|"
    r"between|equal to|equals|not equal to|other than|except|excluding|not in|after|before|since|until|"
    r"older than|younger than|earlier than|later than|contains?|containing|starts? with|starting with|ends? with|"
    r"ending with|is missing|are missing|is null|is not null|are not null|non-null|not null|not missing|over|under)\b"
)
GENERIC_FILTER = re.compile(r"\b(where|whose|filter|filtered|filtering|only|that are|who are|which are|that have|who have|which have)\b")
ORDER_WORDS = re.compile(
    r"\b(sort|sorted|sorting|ordered|in (?:\w+ ){0,2}order|order by|order of|ascending|descending|rank|ranked|ranking|"
    r"alphabetical|alphabetically|highest to lowest|lowest to highest|largest to smallest|smallest to largest|from most|from least|"
    r"(?:highest|lowest|largest|smallest|biggest|most recent|newest|oldest|latest|earliest|most|fewest|least)(?:\s+[\w-]+){0,2}\s+first)\b(?! to\b)"
)
JOIN_WORDS = re.compile(r"\b(join|joined|joining|merge|merged|merging)\b")
# Words that say a column does not matter: "(all statuses)", "whatever the status", "regardless of status".
INDIFFERENT = re.compile(r"\b(all|any|every|whatever|regardless of|irrespective of|no matter|ignoring|ignore|including)\s+(?:the\s+|its\s+|their\s+)?$")
GROUP_EXPLICIT = re.compile(r"\b(group(?:ed)?\s+by|grouping\s+by|per|for\s+each|for\s+every|in\s+each|broken\s+down\s+by|split\s+by|by\s+each)\s+")
GROUP_BY = re.compile(r"\bby\s+")
NOT_GROUP_BEFORE_BY = re.compile(r"\b(sort|sorted|sorting|order|ordered|rank|ranked|ranking|group|grouped|grouping|down|split|top|bottom)\s*$")
STOP_WORDS = re.compile(
    r"\b(where|whose|with|that|which|who|sorted|sort|ordered|order|having|in descending|in ascending|descending|"
    r"ascending|only|limit|top|for|then|show|return|list|give|from|of the|excluding|except)\b|[.,;?!()]"
)
AGGREGATE_WORDS = re.compile("|".join(STAT_KEYWORDS[k] for k in ("mean", "sum", "count", "median", "std", "nunique")))


@dataclass
class Mention:
    column: str
    start: int
    end: int


@dataclass
class QuestionFacts:
    text: str
    mentioned_columns: list[str]  # required: mentioned, and not to say they do not matter
    mentions: list[Mention]
    stat_operations: list[str]
    top_n: list[int | None] = field(default_factory=list)
    bottom_n: list[int | None] = field(default_factory=list)
    wants_filter: bool = False
    filter_conditions: int = 0
    groupby_columns: list[str] = field(default_factory=list)
    wants_sort: bool = False
    wants_join: bool = False
    join_keys: list[str] = field(default_factory=list)
    asks_order: bool = False


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    return int(text) if text.isdigit() else NUMBER_WORDS.get(text)


def _variants(column: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", column)
    base = {column.lower(), re.sub(r"[_\-\s]+", " ", spaced.lower()).strip()}
    out = set(base)
    for name in base:
        if name.endswith("y") and len(name) > 2:
            out.add(name[:-1] + "ies")
        out.add(name + "s")
        out.add(name + "es")
    return {v for v in out if v}


def find_mentions(text: str, columns: list[str]) -> list[Mention]:
    """Every column mention in ``text`` (already lower-cased), longest first where they overlap."""
    found: list[Mention] = []
    for column in sorted(set(columns), key=len, reverse=True):
        if len(column.strip()) <= 1:
            patterns = [r"[`'\"]" + re.escape(column.lower()) + r"[`'\"]"]
        else:
            patterns = [r"(?<![a-z0-9_])" + re.escape(v) + r"(?![a-z0-9_])" for v in sorted(_variants(column), key=len, reverse=True)]
        for pattern in patterns:
            for match in re.finditer(pattern, text):
                if any(m.start < match.end() and match.start() < m.end for m in found):
                    continue
                found.append(Mention(column, match.start(), match.end()))
    return sorted(found, key=lambda m: m.start)


def _mask(text: str, mentions: list[Mention]) -> str:
    chars = list(text)
    for m in mentions:
        chars[m.start : m.end] = ["#"] * (m.end - m.start)
    return "".join(chars)


def _phrase_columns(masked: str, mentions: list[Mention], start: int) -> list[str]:
    """Columns mentioned from ``start`` until a stop word (``by department and gender`` → both)."""
    stop = STOP_WORDS.search(masked, start)
    end = stop.start() if stop else len(masked)
    return [m.column for m in mentions if start <= m.start < end]


def analyse_question(question: str, columns: list[str]) -> QuestionFacts:
    text = " ".join(question.lower().split())
    mentions = find_mentions(text, columns)
    masked = _mask(text, mentions)
    indifferent = {m.column for m in mentions if INDIFFERENT.search(text[: m.start])}
    mentioned = list(dict.fromkeys(m.column for m in mentions if m.column not in indifferent))

    top = [(_number(m.group(2) or m.group(3))) for m in TOP_N.finditer(masked)]
    bottom = [(_number(m.group(2) or m.group(3))) for m in BOTTOM_N.finditer(masked)]
    without_ranked = TOP_N.sub(" ", BOTTOM_N.sub(" ", masked))
    stats = [op for op, pattern in STAT_KEYWORDS.items() if re.search(pattern, without_ranked)]

    groupby: list[str] = []
    for match in GROUP_EXPLICIT.finditer(masked):
        groupby += _phrase_columns(masked, mentions, match.end())
    if AGGREGATE_WORDS.search(masked):
        first_aggregate = AGGREGATE_WORDS.search(masked)
        for match in GROUP_BY.finditer(masked):
            before = masked[: match.start()]
            if first_aggregate is not None and first_aggregate.start() < match.start() and not NOT_GROUP_BEFORE_BY.search(before):
                groupby += _phrase_columns(masked, mentions, match.end())
    groupby = list(dict.fromkeys(groupby))
    if groupby and "groupby" not in stats:
        stats.append("groupby")

    wants_filter = bool(CONDITION_PHRASES.search(masked)) or bool(GENERIC_FILTER.search(masked))
    conditions = 1 if wants_filter else 0  # phrases say that it is filtered, not how many conditions

    asks_order = bool(ORDER_WORDS.search(masked))
    explicit_sort = asks_order or bool(top) or bool(bottom)
    join_keys: list[str] = []
    for match in re.finditer(r"\b(?:join|joined|merge|merged|match|matched|matching|combine|combined)\b[^.;?!]*?\bon\s+", masked):
        join_keys += _phrase_columns(masked, mentions, match.end())
    return QuestionFacts(
        text=text,
        mentioned_columns=mentioned,
        mentions=mentions,
        stat_operations=stats,
        top_n=top,
        bottom_n=bottom,
        wants_filter=wants_filter,
        filter_conditions=conditions,
        groupby_columns=groupby,
        wants_sort=explicit_sort,
        wants_join=bool(JOIN_WORDS.search(masked)),
        join_keys=list(dict.fromkeys(join_keys)),
        asks_order=asks_order,
    )


def join_implied(facts: QuestionFacts, frames: dict[str, list[str]]) -> bool:
    """Several tables, and the question names columns that only different tables hold."""
    if len(frames) < 2:
        return False
    owners = []
    for column in facts.mentioned_columns:
        holders = {name for name, cols in frames.items() if column in cols}
        if len(holders) == 1:
            owners.append(next(iter(holders)))
    return len(set(owners)) >= 2
