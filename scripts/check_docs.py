"""Check the documentation: the site builds strictly, loads nothing from the network, and
every link of the README resolves. Run by ``make docs-check`` (part of ``make test``).

1. ``mkdocs build --strict`` of ``mkdocs.yml`` into a temporary directory. The config's
   ``validation`` block turns a broken link or anchor, a page missing from the nav and a nav
   entry without its page into warnings, and ``--strict`` makes any warning fail.
2. The built site references no external resource: no ``src``/stylesheet/icon pointing at
   another host, no ``url()``/``@import`` of one in CSS, no ``repo_url`` (Material's script
   would ask GitHub's API) and no mermaid block (it would load mermaid from a CDN). Plain
   hyperlinks to other sites are allowed: a reader's click is not the page fetching.
3. The README: at most ``README_MAX_LINES`` lines, and every relative link and image names a
   file of the repository, every ``#anchor`` a heading of its target (GitHub's slugs).

Exit status 0 when everything holds; otherwise every problem on its own line and 1.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250

_EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//")
_CSS_URL = re.compile(r"""url\(\s*['"]?((?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//[^'")\s]+)""")
_CSS_IMPORT = re.compile(
    r"""@import\s+(?:url\()?\s*['"]?((?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//[^'")\s;]+)"""
)
# Tags whose attribute makes a browser fetch on view.
_FETCHING = {
    "script": "src",
    "img": "src",
    "iframe": "src",
    "source": "src",
    "video": "src",
    "audio": "src",
    "track": "src",
    "embed": "src",
    "object": "data",
    "input": "src",
}
# <link rel=...> values that are only a hyperlink, never fetched by the page.
_LINK_NOT_FETCHED = {"canonical", "alternate", "prev", "next", "author", "license", "help"}


def build_site(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site_dir`` (output captured)."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [
            str(mkdocs),
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


class _Resources(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.external: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        url = ""
        if tag in _FETCHING:
            url = values.get(_FETCHING[tag], "")
        elif tag == "link":
            rels = set(values.get("rel", "").lower().split())
            if not rels or not rels <= _LINK_NOT_FETCHED:
                url = values.get("href", "")
        if url and _EXTERNAL.match(url.strip()):
            self.external.append(f"<{tag}> {url}")
        for candidate in ("srcset", "poster"):
            for part in values.get(candidate, "").split(","):
                part = part.strip().split(" ")[0]
                if part and _EXTERNAL.match(part):
                    self.external.append(f"<{tag} {candidate}> {part}")
        style = values.get("style", "")
        self.external.extend(f"<{tag} style> {u}" for u in css_external(style))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.external.extend(f"<style> {u}" for u in css_external(data))


def css_external(css: str) -> list[str]:
    """External hosts a stylesheet would load (``url(//...)``, ``@import "https://..."``)."""
    return sorted(set(_CSS_URL.findall(css)) | set(_CSS_IMPORT.findall(css)))


def external_resources(site_dir: Path) -> list[str]:
    """Every resource of the built site that a browser would fetch from another host."""
    found: list[str] = []
    for path in sorted(site_dir.rglob("*")):
        if path.suffix == ".html":
            parser = _Resources()
            parser.feed(path.read_text(encoding="utf-8"))
            found.extend(f"{path.relative_to(site_dir)}: {item}" for item in parser.external)
        elif path.suffix == ".css":
            text = path.read_text(encoding="utf-8")
            found.extend(f"{path.relative_to(site_dir)}: {u}" for u in css_external(text))
    return found


def config_problems(config: Path, docs_dir: Path) -> list[str]:
    """Settings that make Material's bundled script fetch from another host."""
    problems = []
    if re.search(r"^\s*repo_url\s*:", config.read_text(encoding="utf-8"), re.MULTILINE):
        problems.append(f"{config.name}: repo_url makes the page query a repository host")
    for page in sorted(docs_dir.rglob("*.md")):
        if re.search(r"^\s*(```|~~~)\s*mermaid", page.read_text(encoding="utf-8"), re.MULTILINE):
            problems.append(
                f"{page.relative_to(docs_dir)}: a mermaid block loads mermaid from a CDN"
            )
    return problems


# --- README links -----------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_REF = re.compile(r"""<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.I)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, _INLINE_CODE.sub("", line)))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # link text only
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """Every anchor of a Markdown file (GitHub's rule: repeated slugs get -1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def readme_problems(readme: Path, max_lines: int = README_MAX_LINES) -> list[str]:
    """Lines over the limit, and links of ``readme`` that do not resolve in its repository."""
    text = readme.read_text(encoding="utf-8")
    problems = []
    lines = len(text.splitlines())
    if lines > max_lines:
        problems.append(f"{readme.name}: {lines} lines, more than {max_lines}")
    base = readme.parent
    for number, line in _prose_lines(text):
        for target in _LINK.findall(line) + _HTML_REF.findall(line):
            if _EXTERNAL.match(target) or target.startswith(("mailto:", "http:", "https:")):
                continue
            path_part, _, anchor = target.partition("#")
            where = f"{readme.name}:{number}: {target}"
            path = (base / path_part).resolve() if path_part else readme.resolve()
            if not path.exists():
                problems.append(f"{where}: no such file")
                continue
            if anchor:
                if path.suffix != ".md":
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                elif anchor not in heading_anchors(path.read_text(encoding="utf-8")):
                    problems.append(f"{where}: no heading with that anchor")
    return problems


def check(root: Path = ROOT) -> list[str]:
    """Every problem of the docs site and the README under ``root`` (empty when all hold)."""
    config = root / "mkdocs.yml"
    problems = config_problems(config, root / "docs")
    with tempfile.TemporaryDirectory(prefix="fedchain-site-") as tmp:
        site = Path(tmp) / "site"
        result = build_site(config, site)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).splitlines()
            problems.append("mkdocs build --strict failed:")
            problems.extend("  " + line for line in output if "WARNING" in line or "Error" in line)
        else:
            problems.extend(f"external resource: {item}" for item in external_resources(site))
    problems.extend(readme_problems(root / "README.md"))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (this one)")
    args = parser.parse_args(argv)
    problems = check(args.root.resolve())
    for problem in problems:
        print(problem)
    if not problems:
        print("docs: site built with --strict, no external resources; README links resolve")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
