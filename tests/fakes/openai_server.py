"""Moved to :mod:`assay.dev.openai_server` (`assay dev fake-judge` serves the fakes); the tests' import path is kept:
this name is that module."""

import sys

from assay.dev import openai_server

sys.modules[__name__] = openai_server
