#!/usr/bin/env python3
"""Print the largest classes and functions (in source lines) of fedchain's packages.

Usage: python scripts/code_sizes.py [ROOT] [--top N]

ROOT defaults to the repository; point it at another checkout (e.g. a ``git worktree`` of
an older commit) to compare before and after a refactoring.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGES = ("protocol", "adapters", "privacy", "clients", "aggregators", "consensus", "fedchain")


def sizes(root: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    classes: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).exists() else []:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(root)
            for node in ast.walk(tree):
                if not hasattr(node, "end_lineno"):
                    continue
                lines = int(node.end_lineno or node.lineno) - node.lineno + 1
                if isinstance(node, ast.ClassDef):
                    classes.append((lines, f"{rel}::{node.name}"))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions.append((lines, f"{rel}::{node.name}"))
    return sorted(classes, reverse=True), sorted(functions, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--top", type=int, default=5, help="how many of each to list")
    args = parser.parse_args()
    classes, functions = sizes(Path(args.root))
    print("largest classes (lines):")
    for lines, name in classes[: args.top]:
        print(f"  {lines:5d}  {name}")
    print("largest functions (lines):")
    for lines, name in functions[: args.top]:
        print(f"  {lines:5d}  {name}")


if __name__ == "__main__":
    main()
