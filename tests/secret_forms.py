"""The forms a secret takes on its way into a session, and a search for any of them.

Shared by the redaction tests of each way in (live recording, the
importers): :func:`encodings` is how a secret is written by the programs
whose output reaches a record (serializers, URL and form encoders, shells,
HTTP clients), :func:`leaks` searches bytes for the secret in any of those
forms, and for each form escaped once more, as a record line holds text.
"""

from __future__ import annotations

import base64
import html
import json
import re
import shlex
from urllib.parse import quote, quote_plus

KNOWN_SECRETS = {
    "aws_secret": "wJalrXUtnFEMI/K7MDENG+bPxRfiCY/EXAMPLEKEY=",
    "quote_backslash": 'pa"ss\\wörd/Secr3t+=-K9',
    "non_ascii": "пароль-Geheimnis-秘密-🔑-9f8e7d",
    "shell_html": "it's $ecret & <tag> %41 value-77",
    "spaces": "correct horse battery staple 42",
}
"""Known secrets with ``/``, ``+``, ``=``, quotes, backslashes, non-ASCII, spaces,
shell and HTML metacharacters."""


_PEM_BODY = [
    "MIIEowIBAAKCAQEAx4Zq9mQ1vB7kT2pLw8sN3dR6fH0jY5cU1eA4gK9bV2nM7xZ",
    "Qp3Lr8Tw2Yk6Hj1Gf4Ds9Az0Xc5Vb7Nm2Qw4Er6Ty8Ui1Op3As5Df7Gh9Jk2Lz4",
    "Xc6Vb8Nm0Qw2Er4Ty6Ui8Op0As2Df4Gh6Jk8Lz0Xc2Vb4Nm6Qw8Er0Ty2Ui4Op=",
]
_OPENSSH_BODY = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACDxQm9vN2ZqS3JkTGJ4VjBuRzZ0WUhrUDhzQ1l3AAAAkJ3x9Wqd8fVqAAAA",
]
_BASIC = base64.b64encode(b"deploy:Tr0ub4dor&3-horse").decode()

SHAPES: dict[str, tuple[str, list[str]]] = {
    "openai": (
        "OPENAI_API_KEY=sk-proj-T3BlbkFJ9xQ2mV7nL4pR8sK1wY6zA0cD5eF",
        ["sk-proj-T3BlbkFJ9xQ2mV7nL4pR8sK1wY6zA0cD5eF"],
    ),
    "openai_legacy": (
        "key: sk-4f9Kx7Qm2Lz8Wp3Rt5Yv1Nb6Hj0Gf4Ds9Az2Xc5Vb7Nm1Qw3E",
        ["sk-4f9Kx7Qm2Lz8Wp3Rt5Yv1Nb6Hj0Gf4Ds9Az2Xc5Vb7Nm1Qw3E"],
    ),
    "anthropic": (
        "x-api-key: sk-ant-api03-" + "Zq8_Lm3-Xv7Tn2Kp9Rw4" * 4 + "Ab1Cd2Ef3Gh4Ij5AA",
        ["sk-ant-api03-" + "Zq8_Lm3-Xv7Tn2Kp9Rw4" * 4 + "Ab1Cd2Ef3Gh4Ij5AA"],
    ),
    "stripe_live": (
        "stripe.api_key = 'sk_live_51H8xYzABCdefGHIjklMNOpq0123456789'",
        ["sk_live_51H8xYzABCdefGHIjklMNOpq0123456789"],
    ),
    "stripe_restricted": (
        "rk_live_51H8xYzQRSTuvWXyzABcd9876543210",
        ["rk_live_51H8xYzQRSTuvWXyzABcd9876543210"],
    ),
    "github_classic": (
        "git clone https://x-access-token:ghp_R4nd0mT0k3nV4lu3xYz0123456789AbCd@github.com/o/r",
        ["ghp_R4nd0mT0k3nV4lu3xYz0123456789AbCd"],
    ),
    "github_app": (
        "GH_TOKEN=ghs_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R",
        ["ghs_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"],
    ),
    "github_fine_grained": (
        "token github_pat_11AABBCCD0123456789abc_" + "aBcDeFgHiJ" * 6,
        ["github_pat_11AABBCCD0123456789abc_" + "aBcDeFgHiJ" * 6],
    ),
    "gitlab": ("PRIVATE-TOKEN: glpat-xYz12AbC34dEf56GhI7k", ["glpat-xYz12AbC34dEf56GhI7k"]),
    "slack_bot": (
        "SLACK_BOT_TOKEN=xoxb-2401234567890-2412345678901-AbCdEfGhIjKlMnOpQrStUvWx",
        ["xoxb-2401234567890-2412345678901-AbCdEfGhIjKlMnOpQrStUvWx"],
    ),
    "slack_webhook": (
        "POST https://hooks.slack.com/services/T024BE7LD/B01ABCDEF12/abcdEFGHijklMNOPqrstUVWX",
        ["abcdEFGHijklMNOPqrstUVWX"],
    ),
    "google_api_key": (
        "https://maps.googleapis.com/maps/api/js?libraries=places&v=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",
        ["AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"],
    ),
    "google_client_secret": (
        '"client_secret": "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"',
        ["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"],
    ),
    "google_access_token": (
        "access ya29.a0AfH6SMBxYz12AbCdEfGhIjKlMnOpQrStUvWx",
        ["a0AfH6SMBxYz12AbCdEfGhIjKlMnOpQrStUvWx"],
    ),
    "aws_key_id": ("aws_access_key_id = AKIA2OGYBAH6ZEXAMPLE", ["AKIA2OGYBAH6ZEXAMPLE"]),
    "aws_secret_env": (
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
        ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"],
    ),
    "aws_sts_json": (
        '{"Credentials": {"AccessKeyId": "ASIAY34FZKBOKMUTVV7A", '
        '"SecretAccessKey": "9drTJvcXLB89EXAMPLELB8923FB892xMFI+Zq/Wp", '
        '"SessionToken": "FwoGZXIvYXdzEJr//////////wEaDM7example+SessionToken/Q=="}}',
        [
            "ASIAY34FZKBOKMUTVV7A",
            "9drTJvcXLB89EXAMPLELB8923FB892xMFI+Zq/Wp",
            "FwoGZXIvYXdzEJr//////////wEaDM7example+SessionToken/Q==",
        ],
    ),
    "aws_credentials_file": (
        "[default]\naws_secret_access_key = je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY\n",
        ["je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"],
    ),
    "huggingface": (
        "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        ["hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"],
    ),
    "npm": (
        "//registry.npmjs.org/:_authToken=npm_aB3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j",
        ["npm_aB3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j"],
    ),
    "pypi": (
        "password = pypi-AgEIcHlwaS5vcmcCJGE0ZjZhYjQ5LWZmZTgtNDU5Yy1iNjQ5LWE2ZDk3NjU0MzIxMAAC",
        ["pypi-AgEIcHlwaS5vcmcCJGE0ZjZhYjQ5LWZmZTgtNDU5Yy1iNjQ5LWE2ZDk3NjU0MzIxMAAC"],
    ),
    "jwt": (
        "id_token: eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6Ikpv"
        "aG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        [
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
            "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ",
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        ],
    ),
    "pem_rsa": (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(_PEM_BODY)
        + "\n-----END RSA PRIVATE KEY-----\n",
        _PEM_BODY,
    ),
    "pem_openssh": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\r\n"
        + "\r\n".join(_OPENSSH_BODY)
        + "\r\n-----END OPENSSH PRIVATE KEY-----",
        _OPENSSH_BODY,
    ),
    "bearer_header": (
        "Authorization: Bearer 4f9a.Kx7_Qm-2Lz~8Wp/3Rt+5Yv=",
        ["4f9a.Kx7_Qm-2Lz~8Wp/3Rt+5Yv="],
    ),
    "bearer_alone": (
        "token_type=Bearer; use Bearer Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA",
        ["Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"],
    ),
    "basic": (f"curl -H 'Authorization: Basic {_BASIC}' https://api.example.com", [_BASIC]),
    "authorization_token": (
        '"headers": {"authorization": "token 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"}',
        ["0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"],
    ),
    "url_password": (
        "DATABASE_URL=postgres://app_user:Pg-s3cr3t-Pw0rd@db.internal:5432/app",
        ["Pg-s3cr3t-Pw0rd"],
    ),
    "url_password_no_user": ("redis://:R3dis-Passw0rd-x@cache:6379/0", ["R3dis-Passw0rd-x"]),
    "query_password": (
        "GET https://api.example.com/login?user=bob&password=Hunter2-Query-Pw&x=1",
        ["Hunter2-Query-Pw"],
    ),
    "query_access_token": (
        "redirect https://app.example.com/cb?state=ok&access_token=Q9fK2mX7pL4rT8sN1vB6 done",
        ["Q9fK2mX7pL4rT8sN1vB6"],
    ),
}
"""One sample of each token shape: the text a tool prints, and the secret parts in it."""

SHAPE_ENCODINGS = ("raw", "json_ascii", "json_slash", "json_twice", "url", "form", "html")
"""The forms a shape's whole text is checked in (see :func:`encodings`)."""


def _go_json(text: str) -> str:
    """JSON as Go's ``encoding/json`` writes it: ``<``, ``>`` and ``&`` as ``\\u00XX``."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def encodings(secret: str) -> dict[str, str]:
    """Each form the text of a tool output, URL, log or command line may hold ``secret`` in."""
    basic = f"user:{secret}".encode()
    return {
        "raw": secret,
        "json_ascii": json.dumps(secret)[1:-1],
        "json_utf8": json.dumps(secret, ensure_ascii=False)[1:-1],
        "json_slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "json_twice": json.dumps(json.dumps(secret))[1:-1],
        "json_go": _go_json(secret),
        "url": quote(secret, safe=""),
        "url_path": quote(secret),
        "url_lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(secret, safe="")),
        "url_twice": quote(quote(secret, safe=""), safe=""),
        "form": quote_plus(secret),
        "html": html.escape(secret),
        "shell": shlex.quote(secret),
        "basic": base64.b64encode(basic).decode(),
        "basic_shifted": base64.b64encode(b"u" + basic).decode(),
        "basic_urlsafe": base64.urlsafe_b64encode(b"us" + basic).decode(),
    }


def needles(secret: str) -> dict[str, bytes]:
    """What must not appear in a file: each form, as text and as a JSON string holds it.

    For base64, the 4-character groups that hold only the secret's bytes, at
    each alignment and in both alphabets, whatever surrounds them.
    """
    found: dict[str, bytes] = {}
    for name, form in encodings(secret).items():
        if name.startswith("basic"):
            continue
        found[name] = form.encode()
        found[f"{name} in JSON"] = json.dumps(form, ensure_ascii=False)[1:-1].encode()
    raw = secret.encode()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        first = 4 * ((shift + 2) // 3)
        last = 4 * ((shift + len(raw)) // 3)
        stable = encoded[first:last]
        found[f"base64 at {shift}"] = stable
        found[f"base64url at {shift}"] = stable.replace(b"+", b"-").replace(b"/", b"_")
    return found


def leaks(secrets: dict[str, str], places: dict[str, bytes]) -> list[str]:
    """Every (secret, form, place) where a form of a secret occurs."""
    return [
        f"{name} ({form}) in {where}"
        for name, secret in secrets.items()
        for form, needle in needles(secret).items()
        for where, haystack in places.items()
        if needle in haystack
    ]
