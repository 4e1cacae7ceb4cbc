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
