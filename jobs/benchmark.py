"""The benchmark: one workload three ways side by side (raytf, hand-launched MWMS, Ray Train).

    python jobs/benchmark.py --out docs/benchmarks.md     # the full run (about 40 min here)
    python jobs/benchmark.py --smoke                      # every figure at tiny sizes
    python jobs/benchmark.py --use-gpu --workers 4        # on a machine with 4 GPUs

Same as ``raytf bench``; the code is ``raytf/bench/`` (see its ``main.py``).
Ray Train's column needs the ``bench`` extra (``pip install -e '.[bench]'`` in this checkout).
"""

from raytf.bench.main import main

if __name__ == "__main__":
    main()
