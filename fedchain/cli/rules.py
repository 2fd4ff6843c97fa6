"""``fedchain rules``: the aggregation rules and their parameters."""

from __future__ import annotations

import argparse
import json
from typing import Any


def main(args: argparse.Namespace) -> int:
    from aggregators.registry import available_rules, get_rule_class

    rows: list[dict[str, Any]] = []
    for name in available_rules():
        cls = get_rule_class(name)
        rows.append(
            {
                "rule": name,
                "summary": cls.summary,
                "stateful": cls.stateful,
                "params": [
                    {
                        "name": s.name,
                        "type": s.kind.__name__,
                        "required": s.required,
                        "default": s.default,
                        "doc": s.doc,
                    }
                    for s in cls.param_specs
                ],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['rule']}: {row['summary']}")
        for prm in row["params"]:
            dflt = "required" if prm["required"] else f"default {prm['default']}"
            print(f"    {prm['name']} ({prm['type']}, {dflt}) {prm['doc']}")
    return 0
