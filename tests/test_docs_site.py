"""The docs check (``make docs-check``, part of ``make test``) can fail.

``scripts/check_docs.py`` builds the site with ``mkdocs build --strict``, checks the built
pages for external resources and checks the README's links. These tests run the same checks
on copies with one fault planted each and require the check to fail naming that fault. mkdocs
is a dev dependency (pyproject ``dev`` extra, ``requirements.lock``), so nothing here skips.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _load_check_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_docs", module)
    spec.loader.exec_module(module)
    return module


check_docs = _load_check_docs()


def _site_copy(dest: Path) -> Path:
    """``docs/`` and ``mkdocs.yml`` copied to ``dest``; the API pages still read this tree."""
    shutil.copytree(ROOT / "docs", dest / "docs")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT)]
            python["options"]["extensions"] = [
                str(ROOT / e) for e in python["options"].get("extensions", [])
            ]
    path = dest / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _append(page: Path, text: str) -> None:
    page.write_text(page.read_text(encoding="utf-8") + "\n" + text + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("plant", "named"),
    [
        # a link to a page that does not exist
        (
            lambda d: _append(d / "i-want-to.md", "See [the missing page](no-such-page.md)."),
            "no-such-page.md",
        ),
        # an anchor that no heading of the target page has
        (
            lambda d: _append(d / "demo.md", "See [rules](rules.md#no-such-heading)."),
            "no-such-heading",
        ),
        # a page that the nav leaves out
        (
            lambda d: (d / "orphan-page.md").write_text("# Orphan\n", encoding="utf-8"),
            "orphan-page.md",
        ),
    ],
    ids=["broken-link", "broken-anchor", "page-not-in-nav"],
)
def test_strict_build_fails_on_a_planted_fault(
    tmp_path: Path, plant: Callable[[Path], object], named: str
) -> None:
    config = _site_copy(tmp_path / "copy")
    plant(tmp_path / "copy" / "docs")
    result = check_docs.build_site(config, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "WARNING" in output and named in output, output


def test_external_resources_are_reported(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    (site / "index.html").write_text(
        "<html><head>"
        '<link rel="stylesheet" href="https://fonts.example.org/css?family=Roboto">'
        '<link rel="canonical" href="https://docs.example.org/">'
        '<script src="//cdn.example.net/mermaid.min.js"></script>'
        '<script src="assets/local.js"></script>'
        "</head><body>"
        '<a href="https://example.org/paper.pdf">a paper</a>'
        '<img src="figures/local.png">'
        '<div style="background: url(https://img.example.com/x.png)"></div>'
        "</body></html>",
        encoding="utf-8",
    )
    (site / "assets" / "site.css").write_text(
        '@import url("https://fonts.example.org/x.css");\n.a { background: url(img/b.png); }\n',
        encoding="utf-8",
    )
    found = "\n".join(check_docs.external_resources(site))
    assert "fonts.example.org/css" in found  # stylesheet
    assert "cdn.example.net/mermaid.min.js" in found  # protocol-relative script
    assert "img.example.com/x.png" in found  # inline style
    assert "fonts.example.org/x.css" in found  # CSS @import
    # hyperlinks and local files are not resources fetched from another host
    assert "paper.pdf" not in found
    assert "docs.example.org" not in found
    assert "local" not in found
    assert len(check_docs.external_resources(site)) == 4


def test_config_that_would_fetch_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n```mermaid\ngraph LR\n```\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: x\nrepo_url: https://example.org/x\n", encoding="utf-8")
    problems = "\n".join(check_docs.config_problems(config, tmp_path / "docs"))
    assert "repo_url" in problems
    assert "a.md" in problems and "mermaid" in problems


def test_readme_check_reports_broken_links_and_anchors(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert check_docs.readme_problems(readme) == []
    _append(readme, "Read [the gone page](docs/gone.md) and [rules](docs/rules.md#not-a-heading).")
    _append(readme, "Code is not checked: `[x](nowhere.md)`.")
    problems = check_docs.readme_problems(readme)
    assert len(problems) == 2, problems
    assert "docs/gone.md: no such file" in problems[0]
    assert "docs/rules.md#not-a-heading: no heading with that anchor" in problems[1]


def test_readme_check_reports_a_long_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n" + "line\n" * 250, encoding="utf-8")
    problems = check_docs.readme_problems(readme)
    assert problems == ["README.md: 251 lines, more than 250"]


def test_github_anchors_follow_githubs_rule() -> None:
    text = "# A title\n## Gas (exact, `bench.py`)\n## A title\n```\n# not a heading\n```\n"
    assert check_docs.heading_anchors(text) == {"a-title", "gas-exact-benchpy", "a-title-1"}


def test_sphinx_roles_become_code_spans_on_the_api_page() -> None:
    spec = importlib.util.spec_from_file_location(
        "griffe_rst_roles", ROOT / "scripts" / "griffe_rst_roles.py"
    )
    assert spec is not None and spec.loader is not None
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    text = "see :func:`aggregators.intmath.exact` and :class:`~protocol.codec.TensorSpec`; `x`"
    assert (
        roles.strip_roles(text)
        == "see `aggregators.intmath.exact` and `protocol.codec.TensorSpec`; `x`"
    )
