"""Moved to :mod:`assay.dev.anthropic_server` (`assay dev fake-judge` serves the fakes); the tests' import path is kept:
this name is that module."""

import sys

from assay.dev import anthropic_server

if __name__ == "__main__":
    anthropic_server.main()
else:
    sys.modules[__name__] = anthropic_server
