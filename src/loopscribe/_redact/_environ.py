"""The credentials of the environment: values of credential-named variables."""

from __future__ import annotations

import re
from collections.abc import Mapping

# -- the environment --------------------------------------------------------------

_CREDENTIAL_WORDS = frozenset(
    {
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "PAT",
    }
)
_CREDENTIAL_ENDINGS = ("APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE")
_MIN_ENV_SECRET_CHARS = 8
"""Shorter environment values (``test``, ``dummy``) are not taken as secrets."""


def _credential_values(environ: Mapping[str, str]) -> list[str]:
    """The values of credential-named environment variables, as secrets to remove.

    A name is credential-named when one of its words (split at ``_``, ``-``,
    ``.``) is ``KEY``, ``APIKEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
    ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL(S)`` or ``PAT``, or it ends in
    one of those (``PGPASSWORD``): ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``GITHUB_TOKEN``,
    ``HF_TOKEN``, ... Values shorter than 8 characters (``test``, ``dummy``)
    and file paths are left out.

    Args:
        environ: The environment, such as ``os.environ``.

    Returns:
        The values, in the environment's order, without repeats.
    """
    found: dict[str, None] = {}
    for name, value in environ.items():
        upper = name.upper()
        words = set(re.split(r"[^A-Z0-9]+", upper))
        if not (words & _CREDENTIAL_WORDS or upper.endswith(_CREDENTIAL_ENDINGS)):
            continue
        secret = value.strip()
        if len(secret) < _MIN_ENV_SECRET_CHARS or secret.startswith(("/", "~", "./")):
            continue
        found[secret] = None
    return list(found)
