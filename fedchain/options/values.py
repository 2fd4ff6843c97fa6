"""Values every ``fedchain`` command checks the same way, wherever they come from (the
command line or the dashboard's forms): run names, list items, secrets and worker limits."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from fedchain.config import run_name_problem
from protocol.errors import ConfigError

__all__ = [
    "FUNDING_KEY_ENV",
    "check_item",
    "funding_key",
    "run_name_problem",
]

#: The environment variable a funding key is read from (never from the command line).
FUNDING_KEY_ENV = "FEDCHAIN_FUNDING_KEY"
#: What a key on the command line would expose, said once for every message.
ARGV_EXPOSES = "a key on the command line is visible to every local user (ps, /proc/PID/cmdline)"


def check_item(field: str, item: str) -> str:
    """One list element of a form field, kept whole: refused if it would read as an option
    (starts with ``-``) or cannot be an argument at all (NUL)."""
    if "\0" in item:
        raise ConfigError(f"{field}: a value contains a NUL character")
    if item.startswith("-"):
        raise ConfigError(f"{field} {item!r}: a value must not start with '-' (read as an option)")
    return item


def funding_key(
    given_on_command_line: str | None,
    key_file: str | None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The funding key: from ``--funding-key-file`` (a file only its owner can read) or the
    ``FEDCHAIN_FUNDING_KEY`` environment variable; None for the default. A key given on the
    command line is refused (without repeating it). Messages never contain the key."""
    environ = os.environ if environ is None else environ
    if given_on_command_line is not None:
        raise ConfigError(
            f"--funding-key: {ARGV_EXPOSES}; put it in ${FUNDING_KEY_ENV} or in a file "
            "readable only by you (chmod 600) given with --funding-key-file"
        )
    if key_file is not None:
        path = Path(key_file)
        try:
            st = path.stat()
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"--funding-key-file {key_file!r}: not a regular file")
            if st.st_mode & 0o077:
                raise ConfigError(
                    f"--funding-key-file {key_file!r}: readable by others (mode "
                    f"{stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
                )
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--funding-key-file {key_file!r}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--funding-key-file {key_file!r}: not a text file") from exc
        if not text:
            raise ConfigError(f"--funding-key-file {key_file!r}: empty")
        return _valid_key(text, f"--funding-key-file {key_file!r}")
    value = environ.get(FUNDING_KEY_ENV, "").strip()
    return _valid_key(value, f"${FUNDING_KEY_ENV}") if value else None


def _valid_key(key: str, source: str) -> str:
    """``key`` if it is a secp256k1 private key, else ConfigError naming where it came
    from (never the key, not even a malformed one)."""
    from eth_account import Account

    try:
        Account.from_key(key)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a valid secp256k1 private key") from exc
    return key
