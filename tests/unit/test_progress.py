import io

from raytf.driver.progress import Progress
from raytf.messages import Report


def test_line_shows_step_metrics_and_rate():
    out = io.StringIO()
    p = Progress(verbose=1, interval_s=0, stream=out)
    p.on_reports([Report(0, {"step": 8, "loss": 0.5}, 1024, 10.0)])
    p.on_reports([Report(1, {"step": 8, "loss": 9.9}, 1024, 10.0)])  # rank 1: not shown
    p.on_reports([Report(0, {"step": 16, "loss": 0.25, "accuracy": 0.75}, 1024, 11.0)])
    line = p.line()
    assert "step 16" in line and "loss 0.25" in line and "accuracy 0.75" in line
    assert "1,024 ex/s" in line
    p.finish("done")
    assert out.getvalue().strip().endswith("[raytf] done")


def test_quiet_prints_nothing():
    out = io.StringIO()
    p = Progress(verbose=0, stream=out)
    p.on_reports([Report(0, {"step": 1}, None, 0.0)])
    p.message("hello")
    p.finish("bye")
    assert out.getvalue() == ""


def test_a_notebook_cell_gets_the_line_redrawn_in_place():
    # What ipykernel's OutStream looks like to raytf: no terminal, a module of its own.
    NotebookStream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    out = NotebookStream()
    p = Progress(verbose=1, interval_s=60, stream=out)
    p.on_reports([Report(0, {"step": 8, "loss": 0.5}, 64, 8.0)])
    assert p.tty and out.getvalue().startswith("\r") and "\n" not in out.getvalue()
    log = io.StringIO()  # a log file: whole lines, no carriage returns
    Progress(verbose=1, interval_s=0, stream=log).on_reports([Report(0, {"step": 8}, 64, 8.0)])
    assert "\r" not in log.getvalue() and log.getvalue().endswith("\n")
