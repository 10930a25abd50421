"""A LangGraph checkpointer that records each committed checkpoint as a loopscribe ``checkpoint``.

LangGraph commits a checkpoint at the end of every super-step through its
checkpointer's ``put``; callbacks never see it (nor its ``checkpoint_id``).
:class:`LoopscribeCheckpointer` wraps the host's own saver, lets it store the
state as before, and then writes a *reference* to what was stored with
``Run.save_checkpoint`` — the ``thread_id``, ``checkpoint_ns`` and
``checkpoint_id`` a host passes back to LangGraph to resume, plus the step
and what caused it. The graph state itself stays in the host's saver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ..._hostkit import Guard
from ..._session import Run, Session

__all__ = ["LoopscribeCheckpointer", "checkpoint_reference"]


def checkpoint_reference(
    config: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a loopscribe ``checkpoint`` record holds for a LangGraph checkpoint: a reference.

    Args:
        config: The config a saver's ``put`` returned (its ``configurable``
            names the stored checkpoint).
        metadata: The checkpoint's metadata (``step``, ``source``), if known.

    Returns:
        ``{"framework": "langgraph", "thread_id", "checkpoint_ns",
        "checkpoint_id", "step", "source"}``, without the keys LangGraph did
        not give.
    """
    configurable = config.get("configurable") or {}
    reference: dict[str, Any] = {"framework": "langgraph"}
    for key in ("thread_id", "checkpoint_ns", "checkpoint_id"):
        value = configurable.get(key)
        if value is not None:
            reference[key] = str(value)
    for key in ("step", "source"):
        value = (metadata or {}).get(key)
        if isinstance(value, int | str):
            reference[key] = value
    return reference


class LoopscribeCheckpointer(BaseCheckpointSaver[Any]):
    """Wrap a LangGraph checkpointer: every checkpoint it commits is also referenced in loopscribe.

    Compile the graph with it in place of the saver::

        saver = LoopscribeCheckpointer(InMemorySaver(), session)
        graph = create_react_agent(model, tools, checkpointer=saver)

    Each ``put`` (a super-step's checkpoint) is stored by the wrapped saver
    first; then ``Run.save_checkpoint`` writes its reference (see
    :func:`checkpoint_reference`) and fsyncs the file, so after a crash the
    file and the saver agree on the last committed step. Given a Session,
    the reference goes to its open run (none open: nothing is written).
    Recording never fails the graph: errors are logged and counted in
    :attr:`errors`.

    Attributes:
        inner: The wrapped saver.
        errors: How many references could not be written.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], target: Run | Session) -> None:
        """Store through ``inner``; reference each checkpoint in ``target``.

        Args:
            inner: The host's checkpointer (``InMemorySaver``, a SQLite or
                Postgres saver, ...).
            target: A loopscribe Run, or a Session whose open run records.
        """
        super().__init__(serde=inner.serde)
        self.inner = inner
        self._target = target
        self._guard = Guard("LangGraph checkpointer")

    def _referenced(self, config: RunnableConfig, metadata: CheckpointMetadata) -> None:
        target = self._target
        run = target.run if isinstance(target, Session) else target
        if run is None or run.closed:
            return
        try:
            run.save_checkpoint(checkpoint_reference(config, metadata))
        except Exception:
            self._guard.failed("a checkpoint reference")

    @property
    def errors(self) -> int:
        """How many references could not be written (the first was logged at ERROR)."""
        return self._guard.errors

    # -- what loopscribe adds --------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the checkpoint with the wrapped saver, then reference it."""
        stored = self.inner.put(config, checkpoint, metadata, new_versions)
        self._referenced(stored, metadata)
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the checkpoint with the wrapped saver, then reference it."""
        stored = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._referenced(stored, metadata)
        return stored

    # -- everything else is the wrapped saver's --------------------------------------------

    @property
    def config_specs(self) -> list[Any]:
        """The wrapped saver's configuration options."""
        return list(self.inner.config_specs)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As the wrapped saver."""
        return self.inner.get_tuple(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As the wrapped saver."""
        return await self.inner.aget_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        """As the wrapped saver."""
        return self.inner.list(config, **kwargs)

    def alist(self, config: RunnableConfig | None, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        """As the wrapped saver."""
        return self.inner.alist(config, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver (pending writes are not checkpoints)."""
        self.inner.put_writes(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver (pending writes are not checkpoints)."""
        await self.inner.aput_writes(*args, **kwargs)

    def delete_thread(self, thread_id: str) -> None:
        """As the wrapped saver."""
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        """As the wrapped saver."""
        await self.inner.adelete_thread(thread_id)

    def delete_for_runs(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        self.inner.delete_for_runs(*args, **kwargs)

    async def adelete_for_runs(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        await self.inner.adelete_for_runs(*args, **kwargs)

    def copy_thread(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        self.inner.copy_thread(*args, **kwargs)

    async def acopy_thread(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        await self.inner.acopy_thread(*args, **kwargs)

    def prune(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        self.inner.prune(*args, **kwargs)

    async def aprune(self, *args: Any, **kwargs: Any) -> None:
        """As the wrapped saver."""
        await self.inner.aprune(*args, **kwargs)

    def get_delta_channel_history(self, *args: Any, **kwargs: Any) -> Any:
        """As the wrapped saver."""
        return self.inner.get_delta_channel_history(*args, **kwargs)

    async def aget_delta_channel_history(self, *args: Any, **kwargs: Any) -> Any:
        """As the wrapped saver."""
        return await self.inner.aget_delta_channel_history(*args, **kwargs)

    def get_next_version(self, current: Any, channel: None) -> Any:
        """As the wrapped saver: versions are its own."""
        return self.inner.get_next_version(current, channel)

    def with_allowlist(
        self, extra_allowlist: Collection[tuple[str, ...]]
    ) -> LoopscribeCheckpointer:
        """The wrapped saver's clone, wrapped the same way."""
        return LoopscribeCheckpointer(self.inner.with_allowlist(extra_allowlist), self._target)
