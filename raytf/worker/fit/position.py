"""Where a Keras ``fit`` call stands, and the ``fit`` calls that resume it there exactly.

A distributed dataset iterator cannot be checkpointed (tensorflow#56372), and
Keras's ``fit`` starts only at an epoch's first batch. What can be restored is
the input's *position*: the number of batches the call has drawn. Keras's own
rules say which stream a batch comes from (``keras.src.trainers.epoch_iterator``):

- **epochs** (``steps_per_epoch`` not given): every epoch iterates the dataset
  afresh, so batch ``b`` of epoch ``e`` is the dataset's element ``b``; the
  epoch ends when the data does.
- **stream** (``steps_per_epoch`` given, an infinite dataset): one iterator for
  the whole call, so the batch after ``d`` drawn is the dataset's element ``d``.

Resuming is then Keras's own ``fit`` on ``dataset.skip(n)``, one call for the
rest of the interrupted epoch (``batch_offset`` keeps the callbacks' batch
numbers and the progress bar where the epoch was) and one for the epochs
after it. Skipping is exact only if the dataset gives the same elements in the
same order every time it is built: ``why_not_exact`` reads its graph for
what does not (an unseeded or per-epoch reshuffle, stateful random ops,
non-deterministic parallel ops, Python code TF cannot see into).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raytf.worker.fit.input_forms import other_input

EPOCHS, STREAM = "epochs", "stream"

# Ops whose output differs from one run (or one iterator) to the next.
_RANDOM_PREFIXES = ("Random", "Stateful", "Multinomial", "TruncatedNormal", "ParameterizedTrunc")
_RANDOM_OPS = {"RngReadAndSkip", "RngSkip", "NonDeterministicInts"}
_PYTHON_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless", "GeneratorDataset"}


@dataclass(frozen=True)
class Position:
    """The next batch of one ``fit`` call: what a checkpoint holds to resume it."""

    call: int  # which fit call of this worker process (0-based)
    epoch: int  # the epoch the next batch belongs to
    batch: int  # batches of that epoch already done
    drawn: int  # batches the call has drawn from its input (the skip in stream mode)


@dataclass(frozen=True)
class Call:
    """One ``fit`` call that runs part of the interrupted one."""

    skip: int  # dataset elements to skip
    initial_epoch: int
    epochs: int
    steps_per_epoch: int | None
    batch_offset: int  # batch numbers the callbacks see are shifted by this


@dataclass(frozen=True)
class InputKind:
    """How ``fit``'s input is read, and why a mid-epoch position would not be exact."""

    mode: str  # EPOCHS or STREAM
    why_not_exact: str | None  # None: any step can be resumed exactly
    steps: int | None  # steps per epoch, when known before the epoch ends
    # Why even a resume at an epoch's start is not exact (``input_forms``), or None.
    restart_note: str | None = None


def resume_calls(at: Position, epochs: int, kind: InputKind) -> list[Call]:
    """The ``fit`` calls that finish a call of ``epochs`` epochs from ``at``."""
    if at.epoch >= epochs:
        return []  # the call had finished: nothing left of it
    spe = kind.steps if kind.mode == STREAM else None
    if at.batch == 0:
        return [Call(at.drawn if spe else 0, at.epoch, epochs, spe, 0)]
    rest = Call(at.drawn if spe else at.batch, at.epoch, at.epoch + 1, None, at.batch)
    if spe:
        rest = Call(at.drawn, at.epoch, at.epoch + 1, spe - at.batch, at.batch)
    calls = [rest]
    if at.epoch + 1 < epochs:
        skip = at.drawn + spe - at.batch if spe else 0
        calls.append(Call(skip, at.epoch + 1, epochs, spe, 0))
    return calls


def classify(x: Any, steps_per_epoch: int | None, shuffle: Any = False) -> InputKind:
    """How ``fit(x, steps_per_epoch=..., shuffle=...)`` reads ``x``."""
    import tensorflow as tf

    if not isinstance(x, tf.data.Dataset):
        why, note = other_input(x, steps_per_epoch, shuffle)
        return InputKind(EPOCHS, why, steps_per_epoch, note)
    card = int(x.cardinality())
    why = why_not_exact(x)  # what makes a resume's batches others, at an epoch start too
    if steps_per_epoch is None:
        steps = card if card >= 0 else None
        return InputKind(EPOCHS, why, steps, why)
    if card == tf.data.INFINITE_CARDINALITY:
        return InputKind(STREAM, why, int(steps_per_epoch), why)
    why = (
        "steps_per_epoch with a dataset of finite length: Keras keeps one iterator across "
        "epochs and restarts it when it runs out; repeat() the dataset, or leave "
        "steps_per_epoch out"
    )
    return InputKind(STREAM, why, int(steps_per_epoch), why)


def why_not_exact(dataset: Any) -> str | None:
    """Why ``dataset.skip(n)`` after a restart might not give the batches the run would
    have got, or None.

    It walks the pipeline's Python objects and reads only its functions' graphs: the
    dataset's own serialized graph would hold every in-memory array as a constant
    (1.9 s for 157 MB here, and past protobuf's 2 GB limit for larger ones)."""
    if dataset.options().deterministic is False:
        return "options().deterministic is False"
    seen: set[int] = set()
    stack = [dataset]
    while stack:
        ds = stack.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        why = _stage_issue(ds)
        if why:
            return why
        try:
            stack.extend(ds._inputs())
        except Exception as exc:  # noqa: BLE001 - a dataset we cannot read: we cannot tell
            return f"its {type(ds).__name__} cannot be read ({type(exc).__name__}: {exc})"
    return None


def _stage_issue(ds: Any) -> str | None:
    """What in one stage of the pipeline (TF's dataset classes, read by their fields)."""
    if hasattr(ds, "_reshuffle_each_iteration"):  # a shuffle
        seeds = [int(getattr(ds, name, 0) or 0) for name in ("_seed", "_seed2")]
        if seeds == [0, 0]:
            return "shuffle() without a seed: its order differs on every run"
        if bool(ds._reshuffle_each_iteration):
            # Measured: a stream resumed with skip() trained on other batches. Each pass
            # draws its order from a seed generator its dataset's iterators share, and a
            # resume makes more passes than the run did (Keras's first look at the data,
            # the skip's own).
            return (
                "shuffle(seed=..., reshuffle_each_iteration=True): each pass over it draws "
                "its order from a generator its iterators share, and a restart makes other "
                "passes (reshuffle_each_iteration=False resumes exactly)"
            )
    if str(getattr(ds, "_deterministic", "")).lower() == "false":
        return f"{type(ds).__name__.lstrip('_')} with deterministic=False"
    for value in vars(ds).values():
        function = getattr(value, "function", None)  # a map, filter, interleave... function
        graph = getattr(function, "graph", None)
        if graph is None:
            continue
        graph_def = graph.as_graph_def()
        nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
        for node in nodes:
            why = _op_issue(node)
            if why:
                return why
    return None


def _op_issue(node: Any) -> str | None:
    op = node.op
    if op in _PYTHON_OPS:
        return f"Python code in the pipeline ({op}: from_generator, py_function): TF cannot tell"
    if op in _RANDOM_OPS or (op.startswith(_RANDOM_PREFIXES) and "Stateless" not in op):
        return f"a stateful random op in the pipeline ({op}): use tf.random.stateless_*"
    if op.startswith("Parallel") and "deterministic" in node.attr:
        if node.attr["deterministic"].s == b"false":
            return f"{op} with deterministic=False"
    return None
