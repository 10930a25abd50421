"""Labels read from record data: request parameters and token usage, in every shape."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from loopscribe import Usage
from loopscribe._fields import RequestParams, TokenUsage, request_params, token_usage
from loopscribe._freeze import freeze_config


@dataclass
class Settings:
    """A host's config object (not a mapping)."""

    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    n: int = 1


def test_the_first_spelling_given_wins_whatever_the_key_order() -> None:
    """Aliases of one parameter: the preferred one wins, also when it comes last."""
    config = {"max_new_tokens": 7, "stop": ["b"], "stop_sequences": ["a"], "max_tokens": 5}
    assert request_params(config) == RequestParams(max_tokens=5, stop_sequences=("a",))
    # A preferred spelling that holds null leaves the next one to answer.
    assert request_params({"max_tokens": None, "max_output_tokens": 9}) == RequestParams(
        max_tokens=9
    )
    # One that holds a bad value is still the one read: no label rather than another's.
    assert request_params({"max_tokens": "many", "max_output_tokens": 9}) is None


def test_frozen_configs_objects_and_raw_json_read_alike() -> None:
    """A frozen config (JSON values as Fragments), a dataclass and parsed JSON agree."""
    host = {"temperature": 0.5, "stop": ["\n\n"], "n": 3, "api_key": "sk-x", "extra": {"a": 1}}
    frozen = freeze_config(host)
    assert isinstance(frozen["stop"], orjson.Fragment)
    expected = RequestParams(temperature=0.5, stop_sequences=("\n\n",), choice_count=3)
    assert request_params(frozen) == expected
    assert request_params(orjson.loads(orjson.dumps(host))) == expected
    assert request_params(orjson.Fragment(orjson.dumps(host))) == expected
    assert request_params(Settings(max_completion_tokens=4, max_tokens=2, stop=["x"])) == (
        RequestParams(max_tokens=2, stop_sequences=("x",), choice_count=1)
    )
    assert request_params({"api_key": "sk-x", "tool_choice": "auto"}) is None
    assert request_params(Settings()) == RequestParams(choice_count=1)


def test_token_usage_of_loopscribe_usage_matches_its_json_form() -> None:
    """The typed Usage a live observer sees and the dict a replay sees give the same counts."""
    usage = Usage(input_tokens=120, output_tokens=30, cache_read_tokens=100, reasoning_tokens=10)
    as_json = {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 100,
        "cache_write_tokens": 0,
        "reasoning_tokens": 10,
    }
    assert token_usage(usage) == token_usage(as_json) == TokenUsage(120, 30, 100, 0, 10)
    assert token_usage(Usage()) == TokenUsage(0, 0, 0, 0, 0)
    assert token_usage(Usage(input_tokens=-1, output_tokens=-1, cache_read_tokens=-1)) == (
        TokenUsage(None, None, None, 0, 0)
    )
