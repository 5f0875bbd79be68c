"""Alert-session scoring (the alert-session scoring design, TARSy EP-0028): sessions in, the EP's score API, its
feedback tables and the use cases it names (missing-tool analytics, training-data curation,
re-scoring a set). The kind itself is :mod:`assay.scoring.kinds.alert_session`.

- :mod:`.store`: sessions as items (one ``external_id`` per session id, versioned on change), their
  latest score, and the feedback rows;
- :mod:`.service`: the rules of ``POST /api/v1/scoring/sessions/{id}/score`` and re-scoring a set;
- :mod:`.views`: the EP's response shape;
- :mod:`.analytics`: missing-tool counts and training-data curation;
- :mod:`.history`: the optional history service a session is fetched from.
"""

SUITE = "alert_session"
