"""Juries of judges: how their members agree (a thin adapter over ``assay.scoring.trust.jury_agreement``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.params import CriteriaHashFilter, SuiteName
from assay.scoring.store.db import transaction
from assay.scoring.trust.jury_agreement import suite_jury_agreement

router = APIRouter(prefix="/api/v1/suites", tags=["juries"], route_class=StrictJsonRoute)

JURY_AGREEMENT_DOC = """How the members of the suite's juries agree, per jury component and criteria hash (one,
or every hash with a jury and a completed score), over each item's latest completed machine score:
Krippendorff's `alpha` over all members at the verdict type's level of measurement (nominal for
`pass_fail` and `labels`, ordinal for `scale`, interval for `score` and `criteria`; null with
`alpha_reason` when undefined); for each pair of members (`pairs`), the items both answered, the share
of equal verdicts and Cohen's kappa (`pass_fail`, `labels`) or quadratic-weighted kappa (`scale`), or,
for numeric verdicts, the pair's interval alpha and mean absolute difference; how many items each
member answered; and, when the suite has human labels, each member's and the jury's agreement with
people (`with_people`, the statistics of `GET /api/v1/suites/{name}/agreement`)."""


@router.get("/{name}/jury-agreement", summary="Agreement between the members of the suite's juries", description=JURY_AGREEMENT_DOC)
def jury_agreement(
    name: SuiteName,
    _: Annotated[Principal, Depends(require_principal)],
    criteria_hash: CriteriaHashFilter = None,
) -> dict[str, Any]:
    with transaction() as session:
        return suite_jury_agreement(session, name, criteria_hash)
