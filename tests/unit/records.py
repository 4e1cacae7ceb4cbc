"""Hand-made ``metrics.jsonl`` records for the unit tests of what reads them."""


def report(step, when, rank=0, attempt=0, examples=64, **metrics):
    """One ``report`` record, as ``raytf.observe.recorder`` writes it."""
    return {
        "type": "report",
        "rank": rank,
        "attempt": attempt,
        "step": step,
        "time": when,
        "metrics": metrics,
        "examples": examples,
    }
