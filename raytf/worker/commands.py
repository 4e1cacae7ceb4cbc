"""A worker's side of an interactive ``Session``: run each command the driver sends.

Every rank runs every command in the same order, so collectives inside them
line up. The Keras session (``raytf.keras.loop``) and the custom-loop session
(``CustomLoopRun`` below) share this loop; they differ in what a command does.
A command in ``answering`` that raises answers with the traceback instead of
ending the group: the group stays usable when no collective was left half-run.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from typing import Any

from raytf.errors import ConfigError
from raytf.worker.context import TrainContext, get_context
from raytf.worker.user_fn import call_user

SESSION_ERROR_KEY = "__raytf_error__"


def serve_commands(
    ctx: TrainContext,
    handle: Callable[[str, dict], Any],
    describe: Callable[[], dict],
    answering: Iterable[str],
    on_close: Callable[[], Any],
) -> Any:
    """Answer the opening (command 0), then each command until ``close``."""
    answering = set(answering)
    ctx.reply(0, describe())
    while True:
        command = ctx.next_command()
        op, cid = command.op, command.id
        if op == "close":
            ctx.reply(cid, describe())
            return on_close()
        if op in answering:
            try:
                ctx.reply(cid, handle(op, command.args))
            except Exception:  # noqa: BLE001 - shown to the session's user
                ctx.reply(cid, {SESSION_ERROR_KEY: traceback.format_exc()})
            continue
        ctx.reply(cid, handle(op, command.args))


class CustomLoopRun:
    """One rank of a custom-loop session: ``setup(worker[, config])`` builds whatever the
    loop needs (model, optimizer, iterator, ``tf.function`` steps) and keeps it in
    ``worker.state``; each ``session.run(fn, ...)`` calls ``fn(worker, ...)``. A loop
    that trains sets ``worker.step`` and calls ``worker.ctx.step_end(step)``; what it
    names with ``worker.ctx.restore(...)`` in ``setup`` is what ``checkpoint()`` saves."""

    def __init__(self, setup: Callable[..., Any], config: dict):
        self.ctx = get_context()
        self.strategy = self.ctx.strategy
        self.config = config
        self.step = 0
        self.state = call_user(setup, self, config=config)

    def describe(self) -> dict:
        return {"step": self.step, "replicas": int(self.strategy.num_replicas_in_sync)}

    def handle(self, op: str, args: dict) -> Any:
        if op == "run":
            return args["fn"](self, *args["args"], **args["kwargs"])
        if op == "checkpoint":
            self.ctx.checkpoint_now(self.step, "session")
            return {"step": self.step}
        if op == "describe":
            return self.describe()
        raise ConfigError(f"a custom-loop session runs functions (run), not {op!r}")


def run_custom_session(setup: Callable[..., Any], config: dict) -> dict:
    """``train_loop_per_worker`` of ``Session.custom``."""
    worker = CustomLoopRun(setup, config)
    return serve_commands(
        worker.ctx,
        worker.handle,
        worker.describe,
        answering=("run", "describe"),
        on_close=lambda: {"steps": worker.step},
    )
