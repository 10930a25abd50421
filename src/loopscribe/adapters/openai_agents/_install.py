"""What the OpenAI Agents adapter changes in the SDK, and :func:`install` / :func:`uninstall`.

Two things are global in the SDK, and the adapter owns both:

* the **default runner** (``agents.run.set_default_agent_runner``): an agent
  run as a tool (``agent.as_tool()``) starts through it with no hooks, so
  the adapter wraps it once in :class:`_NestingRunner`, which hands such a
  run hooks nested under the tool call that :class:`LoopscribeHooks` are
  recording. A run the host gives its own ``hooks=`` passes through;
* **trace processors** (``agents.add_trace_processor``): a processor sees
  every trace of the process while it is registered.

:func:`install` makes both changes (the runner once; a processor per
loopscribe run asked for) and :func:`uninstall` undoes them exactly: it
closes what every live hooks object and installed processor still holds open
(ending it with the toolkit's ``NotEnded`` error), removes the processors
from the SDK's list, and puts back the runner that was the default before.
``LoopscribeHooks(run)`` installs the runner itself, as it always has.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol

from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
from agents.tool_context import ToolContext

from ..._model import Execution
from ..._session import Run
from ._tracing import LoopscribeTraceProcessor

__all__ = ["install", "installed", "uninstall"]


class _Recording(Protocol):
    """What the runner and :func:`uninstall` need of a ``LoopscribeHooks``."""

    def close(self) -> None: ...

    def nested(self, tool: Execution, kwargs: dict[str, Any]) -> dict[str, Any]: ...


_LOCK = threading.RLock()
# Agent tools being run, by the identity of their tool call: the nested run's
# context is a ToolContext that carries the same tool_call object.
AGENT_TOOL_CALLS: dict[int, tuple[_Recording, Execution]] = {}
# Every hooks object alive, to close what it holds open on uninstall().
_HOOKS: weakref.WeakSet[Any] = weakref.WeakSet()
# The processors install() registered, by the loopscribe run they record into.
_PROCESSORS: dict[int, tuple[Run, LoopscribeTraceProcessor]] = {}


class _NestingRunner(AgentRunner):
    """The SDK's runner, handing nested hooks to the run of an agent used as a tool.

    ``agent.as_tool()`` starts its agent through ``Runner`` with the tool's
    own ``hooks`` (usually none), so ``RunHooks`` never see that run. This
    runner wraps the default one: when a run starts without hooks inside a
    tool call that :class:`LoopscribeHooks` are recording, it records that
    run with hooks nested under the tool call. Every other run passes
    through untouched.
    """

    def __init__(self, inner: AgentRunner) -> None:
        super().__init__()
        self.inner = inner

    def _nested(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        context = kwargs.get("context")
        if kwargs.get("hooks") is not None or not isinstance(context, ToolContext):
            return kwargs
        found = AGENT_TOOL_CALLS.get(id(context.tool_call))
        if found is None:
            return kwargs
        outer, tool_execution = found
        return outer.nested(tool_execution, kwargs)

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return await self.inner.run(starting_agent, input, **self._nested(kwargs))

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **self._nested(kwargs))

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_streamed(starting_agent, input, **self._nested(kwargs))


def watch(hooks: _Recording) -> None:
    """Install the runner (once) and remember ``hooks`` for :func:`uninstall`."""
    with _LOCK:
        _HOOKS.add(hooks)
        _install_runner()


def _install_runner() -> None:
    current = get_default_agent_runner()
    if not isinstance(current, _NestingRunner):
        set_default_agent_runner(_NestingRunner(current))


def install(run: Run | None = None) -> LoopscribeTraceProcessor | None:
    """Install what the adapter needs in the SDK; safe to call again.

    Always wraps the SDK's default runner once, so an agent run as a tool
    is recorded by hooks nested under its tool call. Given ``run``, also
    registers a :class:`LoopscribeTraceProcessor` recording every trace into
    it (``agents.add_trace_processor``) and returns it; installing for the
    same run again returns the same processor.
    """
    with _LOCK:
        _install_runner()
        if run is None:
            return None
        found = _PROCESSORS.get(id(run))
        if found is not None and found[0] is run and not found[1].closed:
            return found[1]
        processor = LoopscribeTraceProcessor(run)
        _PROCESSORS[id(run)] = (run, processor)
        processor.register()
        return processor


def installed() -> bool:
    """Whether the adapter's runner is the SDK's default runner now."""
    return isinstance(get_default_agent_runner(), _NestingRunner)


def uninstall() -> None:
    """Undo :func:`install` exactly; safe to call again, never raises into the host.

    In order: every live :class:`LoopscribeHooks` ends what its run left
    open (tools, model call, turn, agent, with the ``NotEnded`` error and
    ``stop_reason`` ``cancelled``) and records nothing more; every processor
    :func:`install` registered ends its open spans' executions the same way
    and is removed from the SDK's processors; the default runner goes back
    to the one the SDK had before (a runner the host set since is left alone).
    Hooks are not thread-safe: call it between runs, or on the thread whose
    event loop runs them (a tool, a signal handler of the loop).
    """
    with _LOCK:
        for hooks in list(_HOOKS):
            hooks.close()
        _HOOKS.clear()
        AGENT_TOOL_CALLS.clear()
        for _run, processor in list(_PROCESSORS.values()):
            processor.close()
        _PROCESSORS.clear()
        current = get_default_agent_runner()
        if isinstance(current, _NestingRunner):
            inner = current.inner
            while isinstance(inner, _NestingRunner):  # pragma: no cover - never wrapped twice
                inner = inner.inner
            set_default_agent_runner(inner)
