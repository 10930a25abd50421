"""LoopscribeSessionStore file names: a file per key, whatever the key; older folders still load.

Keys come from outside (the SDK derives ``project_key`` from a folder path,
and any caller can pass anything). Each must get its own file inside the
store's folder, also on a case-insensitive filesystem, and a folder written
by the previous naming (``tests/data/claude-agent-sdk-store/legacy``, see the
README there) must still load.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from claude_agent_sdk.types import SessionKey, SessionStoreEntry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscribe import read
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

LEGACY = Path(__file__).resolve().parents[1] / "data" / "claude-agent-sdk-store" / "legacy"

_LONG = ("x" * 300, "long-sid")
_LEGACY_TWIN = (hashlib.sha256("\0".join(_LONG).encode()).hexdigest()[:32], "long-sid")
"""A key whose plain name, ``long-sid+<hash>``, is the name the previous naming gave _LONG."""

HOSTILE: list[tuple[str, str]] = [
    ("../../etc", "passwd"),
    ("..", "/x"),
    (".", "."),
    ("", ""),
    ("-home-user-project", "-rf"),
    ("p", ".hidden"),
    ("p/q", "s"),
    ("p", "q/s"),
    ("p", "q+s"),
    ("p+q", "s"),
    ("p", "a\0b"),
    ("p\0", "ab"),
    ("ünï", "c\u00f3de"),
    ("u\u0308", "x"),  # the same text as "ü" once NFC-normalised (as some filesystems do)
    ("ü", "x"),
    ("p", "\ud800 lone"),
    ("p", "\udc00 lone"),
    ("emoji \U0001f600", "s"),
    ("ABC", "s"),
    ("abc", "s"),
    ("Abc", "s"),
    ("abc", "S"),
    ("p", "%2D"),
    ("p", "%2d"),
    ("p", "-"),
    ("p", "~"),
    ("p", "%7E"),
    ("CON", "nul"),
    ("x" * 300, "y" * 300),
    ("x" * 300, "y" * 299 + "z"),
    ("X" * 300, "y" * 300),
    _LONG,
    _LEGACY_TWIN,
    ("é" * 200, "s"),
    ("%" * 150, "%" * 150),
]
"""Keys that would collide under a naive naming: case, escapes, length, traversal, hashes."""


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopscribeSessionStore]:
    """An empty store: its ``path`` names the file each key would get."""
    with LoopscribeSessionStore(tmp_path_factory.mktemp("names")) as store:
        yield store


def hostile(store: LoopscribeSessionStore) -> list[tuple[str, str]]:
    """:data:`HOSTILE`, and keys made of the long key's file name (its ``~`` and all)."""
    hashed = store.path(*_LONG).name.removesuffix(".jsonl")
    session, project = hashed.split("+", 1)
    return [*HOSTILE, (hashed, "s"), ("s", hashed), (project, session)]


def _check_names(store: LoopscribeSessionStore, keys: list[tuple[str, str]]) -> None:
    paths = [store.path(project, session) for project, session in keys]
    assert len({p.name.casefold() for p in paths}) == len(keys)
    for path in paths:
        name = path.name
        assert path.parent == store.directory
        assert name.isascii()
        assert name.isprintable()
        assert "/" not in name
        assert "\0" not in name
        assert name[0] not in "-."
        # The summary file and its temporary copy still fit in a 255-byte name.
        assert len(name + ".sdk-summary.json" + ".abcdefgh.tmp") < 255
        assert name.endswith(".jsonl")


def test_hostile_keys_get_distinct_names_even_ignoring_case(names: LoopscribeSessionStore) -> None:
    """Every hostile key has its own name, distinct case-insensitively, short, ASCII, not hidden."""
    _check_names(names, hostile(names))


_KEY_TEXT = st.text(
    st.sampled_from(string.ascii_letters[:4] + "AB-._~%+/\0ü")
    | st.characters(exclude_categories=()),
    max_size=8,
) | st.text(st.sampled_from("aA%~-+"), min_size=190, max_size=260)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.tuples(_KEY_TEXT, _KEY_TEXT), min_size=2, max_size=6, unique=True))
def test_names_are_injective_for_any_keys(
    names: LoopscribeSessionStore, keys: list[tuple[str, str]]
) -> None:
    """Distinct keys (any text, lone surrogates included) never share a name, in any case."""
    _check_names(names, keys)


def test_each_hostile_key_keeps_its_own_entries_in_the_folder(tmp_path: Path) -> None:
    """Appending under each hostile key and loading it back gives that key's entry alone."""

    async def scenario(store: LoopscribeSessionStore, keys: list[SessionKey]) -> None:
        for i, key in enumerate(keys):
            if await store.load(key) is None:
                await store.append(key, [cast(SessionStoreEntry, {"type": "x", "n": i})])
        for i, key in enumerate(keys):
            assert await store.load(key) == [{"type": "x", "n": i}], key

    for _ in range(2):  # the second store finds the files as another process would
        with LoopscribeSessionStore(tmp_path / "store") as store:
            keys = [
                cast(SessionKey, {"project_key": p, "session_id": s}) for p, s in hostile(store)
            ]
            asyncio.run(scenario(store, keys))
    files = sorted((tmp_path / "store").glob("*.jsonl"))
    assert len(files) == len(keys)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]


# -- a folder written by the previous naming ----------------------------------------------------


def _legacy_entries(name: str, index: int) -> tuple[list[Any], list[Any]]:
    """The main and subagent entries the fixture's store was given for one key."""
    main = [
        {"type": "user", "uuid": f"{name}-1", "timestamp": f"2024-01-0{index + 1}T00:00:00Z",
         "sessionId": "legacy", "message": {"role": "user", "content": f"first prompt of {name}"}},
        {"type": "x", "uuid": f"{name}-2", "n": 2},
        {"type": "custom-title", "customTitle": f"title {name}"},
    ]  # fmt: skip
    return main, [{"type": "x", "uuid": f"{name}-s", "n": 3}]


LEGACY_KEYS = {
    "plain": ("-home-user-proj", "aaaa-1111"),
    "upper": ("-Users-Me-Proj", "Bb-2"),
    "long": _LONG,
}


def key(project: str, session: str, subpath: str | None = None) -> SessionKey:
    found = {"project_key": project, "session_id": session}
    if subpath is not None:
        found["subpath"] = subpath
    return cast(SessionKey, found)


def test_a_folder_written_by_the_previous_naming_still_loads_and_grows(tmp_path: Path) -> None:
    """Older names are found (capitals, long keys); new appends go to the same files."""
    folder = tmp_path / "store"
    shutil.copytree(LEGACY, folder)
    before = sorted(p.name for p in folder.glob("*.jsonl"))
    sub = "subagents/agent-a1"

    async def check(store: LoopscribeSessionStore, more: int) -> None:
        for index, (name, (project, session)) in enumerate(LEGACY_KEYS.items()):
            main, agent = _legacy_entries(name, index)
            extra = [{"type": "x", "uuid": f"{name}-new-{i}"} for i in range(more)]
            assert await store.load(key(project, session)) == main + extra
            assert await store.load(key(project, session, sub)) == agent
            assert await store.list_subkeys(key(project, session)) == [sub]
            listed = await store.list_session_summaries(project)
            assert [s["data"]["custom_title"] for s in listed] == [f"title {name}"]

    with LoopscribeSessionStore(folder) as store:
        asyncio.run(check(store, 0))
        for name, (project, session) in LEGACY_KEYS.items():
            entry = cast(SessionStoreEntry, {"type": "x", "uuid": f"{name}-new-0"})
            asyncio.run(store.append(key(project, session), [entry]))
        asyncio.run(check(store, 1))
    with LoopscribeSessionStore(folder) as store:
        asyncio.run(check(store, 1))
    assert sorted(p.name for p in folder.glob("*.jsonl")) == before
    for path in folder.glob("*.jsonl"):
        assert len({r.session_id for r in read(path, decode=False)}) == 1


def test_the_key_named_like_an_older_long_key_gets_its_own_file(tmp_path: Path) -> None:
    """The key whose plain name is an older store's file of a long key does not write into it."""
    folder = tmp_path / "store"
    shutil.copytree(LEGACY, folder)
    twin = key(*_LEGACY_TWIN)
    entry = cast(SessionStoreEntry, {"type": "x", "uuid": "twin"})
    for _ in range(2):  # a second store finds the same files again
        with LoopscribeSessionStore(folder) as store:
            if asyncio.run(store.load(twin)) is None:
                asyncio.run(store.append(twin, [entry]))
            assert asyncio.run(store.load(twin)) == [entry]
            main, _ = _legacy_entries("long", 2)
            assert asyncio.run(store.load(key(*_LONG))) == main
            assert store.path(*_LEGACY_TWIN) != store.path(*_LONG)
            assert "~" in store.path(*_LEGACY_TWIN).name
