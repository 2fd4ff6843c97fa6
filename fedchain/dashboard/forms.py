"""Control-panel forms derived from the ``fedchain`` command line itself.

:func:`command_forms` reads the argparse parser of ``fedchain`` (:func:`fedchain.options.
build_parser`) and describes each startable subcommand's options as form fields, grouped as
``--help`` groups them (name, option string, kind, choices, default, help text). A command
added to the CLI later (``fedchain experiment``) gets its form without a change here.
:func:`argv_from_form` turns submitted values back into an argument vector, accepting only
the options the command has. Values stay text: the CLI's own parser and checks judge them
(:func:`fedchain.options.check_command`), so a bad value gets the CLI's one-line error.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fedchain.options.values import FUNDING_KEY_ENV, check_item

#: Subcommands the control panel can start (those the parser has), in menu order.
STARTABLE = ("demo", "run", "experiment")
#: Options the panel does not offer: output formats for a terminal, and --help.
HIDDEN_OPTIONS = frozenset({"--help", "--json", "--quiet"})
#: Secret form fields and the environment variable each reaches the job in (never argv).
SECRET_FIELDS = {"funding_key": FUNDING_KEY_ENV}
#: The option whose command takes the secret field (where the form shows it).
_SECRET_BESIDE = {"funding_key": "--funding-key-file"}


@dataclass
class Field:
    """One form field: an option (``--clients``) or a positional argument (``scenarios``)."""

    dest: str
    option: str | None  # None for a positional
    kind: str  # text | choice | flag | list (repeatable or several values) | secret
    help: str
    default: str | None = None
    choices: list[str] = field(default_factory=list)
    required: bool = False


@dataclass
class Group:
    title: str
    fields: list[Field]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _field(action: argparse.Action) -> Field | None:
    option = max(action.option_strings, key=len) if action.option_strings else None
    if option in HIDDEN_OPTIONS or action.help == argparse.SUPPRESS:
        return None
    help_text = (action.help or "").replace("%(default)s", str(action.default))
    if isinstance(action, argparse._StoreTrueAction):
        kind = "flag"
    elif isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*"):
        kind = "list"
    elif action.choices:
        kind = "choice"
    else:
        kind = "text"
    default = None
    if not (
        action.default is None
        or action.default is False
        or action.default == []
        or action.default == argparse.SUPPRESS
    ):
        default = str(action.default)
    return Field(
        dest=action.dest,
        option=option,
        kind=kind,
        help=help_text,
        default=default,
        choices=[str(c) for c in action.choices] if action.choices else [],
        required=bool(action.required) or (option is None and action.nargs == "+"),
    )


def command_forms(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Per startable subcommand: its description and field groups (JSON-ready)."""
    out: dict[str, dict[str, Any]] = {}
    subs = _subparsers(parser)
    for name in STARTABLE:
        sub = subs.get(name)
        if sub is None:
            continue
        groups = []
        for group in sub._action_groups:
            fields = [f for a in group._group_actions if (f := _field(a)) is not None]
            fields += _secret_fields(fields)
            if fields:
                title = "arguments" if group.title == "positional arguments" else group.title
                groups.append(asdict(Group(title or "options", fields)))
        out[name] = {"description": sub.description or "", "groups": groups}
    return out


def _secret_fields(fields: list[Field]) -> list[Field]:
    """The password fields that go beside a group's key-file option."""
    options = {f.option for f in fields}
    return [
        Field(
            dest=dest,
            option=None,
            kind="secret",
            help="private key that funds the run's accounts on --rpc-url: the process gets "
            f"it in its environment (${FUNDING_KEY_ENV}), never on its command line; it is "
            "redacted from the job's log and never shown",
        )
        for dest, beside in _SECRET_BESIDE.items()
        if beside in options
    ]


def argv_from_form(
    parser: argparse.ArgumentParser,
    command: str,
    values: Mapping[str, Any],
) -> list[str]:
    """``[command, ...]`` from submitted field values keyed by ``dest``.

    Empty values are left out (the CLI's default applies). A ``list`` field takes a JSON
    list (each element one argument, kept whole: a path with a space stays one path) or
    text split on whitespace (a repeatable option is repeated); an element starting with
    ``-`` is refused (``ConfigError``: it would read as an option). An option's value is
    passed as ``--option=VALUE``, so no value can become an option. A ``flag`` is given
    when true; ``secret`` fields are not arguments (:data:`SECRET_FIELDS`). Raises
    ``KeyError`` naming a field the command does not have.
    """
    forms = command_forms(parser)
    if command not in forms:
        raise KeyError(f"command {command!r}: the control panel starts {sorted(forms)}")
    fields = {f["dest"]: f for g in forms[command]["groups"] for f in g["fields"]}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise KeyError(f"fedchain {command} has no option {unknown[0]!r}")
    positional: list[str] = []
    options: list[str] = []
    for dest, f in fields.items():  # the parser's order
        value = values.get(dest)
        if value is None or value is False or value == "" or value == []:
            continue
        if f["kind"] == "secret":
            continue
        if f["kind"] == "flag":
            if value is True or str(value).lower() in ("1", "true", "on", "yes"):
                options.append(f["option"])
            continue
        label = f["option"] or dest
        if f["kind"] == "list":
            items = [check_item(label, item) for item in _items(value)]
        else:
            items = [str(value).strip()]
            if "\0" in items[0]:
                check_item(label, items[0])
        if f["option"] is None:
            positional += [check_item(label, item) for item in items]
        elif f["kind"] == "list" and _repeatable(parser, command, dest):
            options += [f"{f['option']}={item}" for item in items]
        elif f["kind"] == "list":
            options += [f["option"], *items]
        else:
            options += [f"{f['option']}={items[0]}"]
    return [command, *positional, *options]


def _items(value: Any) -> list[str]:
    """A list field's arguments: each element of a JSON list whole (blank ones dropped),
    or text split on whitespace."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        out: list[str] = []
        for v in value:
            if isinstance(v, Sequence) and not isinstance(v, str):
                out += _items(v)
            elif str(v).strip():
                out.append(str(v).strip())
        return out
    return [p for p in str(value).split() if p]


def _repeatable(parser: argparse.ArgumentParser, command: str, dest: str) -> bool:
    sub = _subparsers(parser)[command]
    return any(isinstance(a, argparse._AppendAction) and a.dest == dest for a in sub._actions)
