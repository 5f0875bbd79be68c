# syntax=docker/dockerfile:1
# The Assay image: one image for every service (api, workers, beat, flower, migrate).
# The command picks the role: `docker run IMAGE api --host 0.0.0.0`, `... worker --queues judge`, ...
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system --gid 10001 assay \
 && useradd --system --uid 10001 --gid assay --home-dir /app --no-create-home --shell /usr/sbin/nologin assay

# The package finds config/ and migrations/ next to the assay/ package (REPO_ROOT in assay/settings.py,
# alembic_config in assay/scoring/store/db.py), so the tree is kept in /app and installed editable:
# /app/assay, /app/config and /app/migrations sit side by side.
WORKDIR /app

# Dependencies first, from pyproject.toml alone, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY README.md ./
COPY assay ./assay
RUN pip install --no-deps -e . \
 && python -c "import assay.settings as s, pathlib; assert s.REPO_ROOT == pathlib.Path('/app'), s.REPO_ROOT"

COPY config ./config
COPY migrations ./migrations
COPY examples ./examples

# Writable places for the non-root user: .assay/ (beat schedule, embedded SQLite) and data/
# (dataset files registered by path). Everything else stays root-owned and read-only to the process.
RUN mkdir -p /app/.assay /app/data \
 && chown assay:assay /app/.assay /app/data

ENV ASSAY_CONFIG_DIR=/app/config \
    ASSAY_DATA_DIR=/app/data \
    ASSAY_BEAT_SCHEDULE_FILE=/app/.assay/celerybeat-schedule

USER assay:assay

EXPOSE 8000 5555

ENTRYPOINT ["assay"]
CMD ["--help"]
