"""The documentation site (docs/): it builds with Sphinx's warnings as errors, its reference pages name
every command, route and setting a user can meet, and its commands are written in one form.

The build runs Sphinx in a subprocess, with ``-E`` (no saved environment) into a temporary directory,
so runs never share state. A small site built with the same conf.py shows that the build does fail
on what it is meant to catch."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from assay.settings import Settings
from tests.surface.snapshot import _commands, openapi_document

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html", str(source), str(out)],
        capture_output=True, text=True, timeout=240,
    )


def test_the_site_builds_without_a_warning(tmp_path):
    done = sphinx_build(DOCS, tmp_path / "html")
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stderr}"
    # BENCHMARKS.md and RELIABILITY.md stay at the root and are brought in whole.
    for page, source in (("benchmarks", "BENCHMARKS.md"), ("reliability", "RELIABILITY.md")):
        html = (tmp_path / "html" / f"{page}.html").read_text()
        last_heading = re.findall(r"^#+ (.+)$", (REPO / source).read_text(), flags=re.M)[-1]
        assert last_heading.split("`")[0].strip() in html, (page, last_heading)


def small_site(root: Path, pages: dict[str, str]) -> Path:
    """A site with the real conf.py and the given pages (name → Markdown)."""
    root.mkdir()
    shutil.copy(DOCS / "conf.py", root / "conf.py")
    for name, text in pages.items():
        (root / f"{name}.md").write_text(text)
    return root


GOOD_SITE = {
    "index": "# Home\n\n```{toctree}\npage\n```\n\nSee [the page](page.md#a-section).\n",
    "page": "# Page\n\n## A section\n\nBack [home](index.md).\n",
}


@pytest.fixture(scope="module")
def good_site_builds(tmp_path_factory):
    """The small site without a fault builds: each fault alone is what fails a build below."""
    root = tmp_path_factory.mktemp("good")
    good = sphinx_build(small_site(root / "source", GOOD_SITE), root / "html")
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize(
    ("case", "pages", "warning"),
    [
        ("a page outside the toctree", {**GOOD_SITE, "stray": "# Stray\n"}, "isn't included in any toctree"),
        ("a link to a missing page", {**GOOD_SITE, "page": "# Page\n\n## A section\n\n[gone](gone.md)\n"},
         "cross-reference target not found"),
        ("a link to a missing heading", {**GOOD_SITE, "index": GOOD_SITE["index"].replace("#a-section", "#no-such")},
         "no-such"),
        ("a missing include", {**GOOD_SITE, "page": "# Page\n\n## A section\n\n```{include} ../NOPE.md\n```\n"},
         "NOPE.md"),
    ],
)
def test_the_build_fails_on(case, pages, warning, tmp_path, good_site_builds):
    bad = sphinx_build(small_site(tmp_path / "bad", pages), tmp_path / "bad-html")
    assert bad.returncode != 0, f"{case}: the build passed"
    assert warning in bad.stderr, bad.stderr


def test_the_cli_page_names_every_command_and_group():
    page = (DOCS / "reference" / "cli.md").read_text()
    from assay.cli import cli

    headings = set(re.findall(r"^#+ `(assay[^`]*)`$", page, flags=re.M))
    commands = {" ".join(("assay", *path)) for path in _commands(typer.main.get_command(cli)) if path}
    assert commands - headings == set(), "commands without a heading on docs/reference/cli.md"
    assert headings - commands - {"assay"} == set(), "headings on docs/reference/cli.md naming no command"


def test_the_api_page_lists_every_route():
    page = (DOCS / "reference" / "api.md").read_text()
    listed = set(re.findall(r"^\| `([A-Z]+ /[^`]*)` \|", page, flags=re.M))
    routes = {f"{method.upper()} {path}" for path, item in openapi_document()["paths"].items() for method in item}
    assert routes - listed == set(), "routes missing from docs/reference/api.md"
    assert listed - routes == set(), "docs/reference/api.md lists routes the API does not have"


def test_the_configuration_page_names_every_setting():
    page = (DOCS / "operations" / "configuration.md").read_text()
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(field.validation_alias if isinstance(field.validation_alias, str) else f"ASSAY_{name.upper()}")
    missing = {name for name in names if f"`{name}`" not in page}
    assert missing == set(), "settings missing from docs/operations/configuration.md"


# A command shown to be run calls the virtualenv's program by path, as the quick start does
# (docs/getting-started.md, "How commands are written here"); bare names are for the prose.
BARE_COMMAND = re.compile(r"^(?:\s*#\s*or:)?\s*(?:[A-Z_]+=\S+\s+)*(assay|pytest|pip|python -m|sphinx-build)\b")


def shell_lines(text: str) -> list[str]:
    lines, in_shell = [], False
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            in_shell = not in_shell and fence.group(1) in ("bash", "sh", "shell", "console")
        elif in_shell:
            lines.append(line)
    return lines


def test_commands_are_written_in_one_form():
    documents = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    bare = [
        f"{path.relative_to(REPO)}: {line.strip()}"
        for path in documents
        if "_build" not in path.parts
        for line in shell_lines(path.read_text())
        if BARE_COMMAND.match(line)
    ]
    assert bare == [], "commands without .venv/bin/"


def test_the_command_form_check_catches_a_bare_command():
    text = "```bash\n.venv/bin/assay migrate\nassay beat\nASSAY_FLOWER_PASSWORD=x assay flower\n```\n"
    assert [line for line in shell_lines(text) if BARE_COMMAND.match(line)] == [
        "assay beat", "ASSAY_FLOWER_PASSWORD=x assay flower",
    ]


def test_the_readme_links_to_files_that_exist():
    # The README is not part of the Sphinx build, so its links to the pages are checked here.
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    assert targets, "the README links to no page"
    assert [target for target in targets if not (REPO / target).exists()] == []
