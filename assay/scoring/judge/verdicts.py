"""Verdict schemas a suite may name. The schema's JSON is part of the criteria, so changing a
verdict model changes the criteria hash of every suite that uses it."""

from __future__ import annotations

from pydantic import BaseModel

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.alert_session import JudgeOutputSchema
from assay.scoring.kinds.kql import KqlGrade
from assay.scoring.kinds.pandas_codegen import PandasCodeReview

VERDICTS: dict[str, type[BaseModel]] = {
    "kql_grade": KqlGrade,
    "alert_session_judge": JudgeOutputSchema,
    "pandas_review": PandasCodeReview,
}


def verdict_model(name: str) -> type[BaseModel]:
    try:
        return VERDICTS[name]
    except KeyError:
        raise CriteriaError(f"unknown verdict schema {name!r}; known: {', '.join(sorted(VERDICTS))}") from None
