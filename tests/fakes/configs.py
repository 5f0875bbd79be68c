"""Config directories for tests: the shipped ``config/`` with the commented local (vLLM) provider
switched on, optionally pointed at a loopback fake."""

from __future__ import annotations

import shutil
from pathlib import Path

from assay.settings import REPO_ROOT

REPO_CONFIG = REPO_ROOT / "config"


def local_config_dir(parent: Path, base_url: str | None = None) -> Path:
    """A copy of the shipped config under ``parent`` with the local provider on; ``base_url``: where
    it is served (a fake OpenAI-compatible server), instead of the commented default."""
    config = parent / "config"
    shutil.copytree(REPO_CONFIG, config)
    text = (config / "models.yaml").read_text()
    start = text.index("  # local:")
    end = text.index("  # Ollama")
    block = "\n".join(line.replace("  # ", "  ", 1) for line in text[start:end].splitlines())
    if base_url is not None:
        block = block.replace("base_url: http://localhost:8000/v1", f"base_url: {base_url}")
    (config / "models.yaml").write_text(text.replace("providers:\n", f"providers:\n{block}\n", 1))
    return config
