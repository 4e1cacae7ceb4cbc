"""Input throughput into TensorFlow on N raytf workers: Ray Data shards vs in-worker tf.data.

    python jobs/data_throughput.py --workers 2 --epochs 4

Same Parquet file, same preprocessing (``train_ray_data.preprocess``), same
per-replica batches; no training, so the figure is the input path alone. Ways:

- ``ray_data``: ``read_parquet(...).map_batches(preprocess)`` split by raytf,
  read through ``raytf.get_dataset_shard(...).to_tf`` (Ray Data reads and
  preprocesses again every epoch, in its own tasks);
- ``tf_data_file``: each worker reads the file and preprocesses it itself,
  every epoch, inside a ``tf.data`` pipeline (``from_generator``), keeping its
  rank's rows;
- ``tf_data_memory``: each worker reads and preprocesses once, then iterates
  ``from_tensor_slices(...).shard(...).batch(...)`` from memory every epoch.

Each rank times each epoch; an epoch's throughput is the rows of all ranks
over the slowest rank's time. The first epoch (pipeline start-up) is reported
apart; the figure is the median of the later ones. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import ray

import raytf
from raytf import ensure_ray

try:
    import train_ray_data
except ImportError:
    from jobs import train_ray_data

ray.cloudpickle.register_pickle_by_value(train_ray_data)

WAYS = ("ray_data", "tf_data_file", "tf_data_memory")


def read_loop(config: dict) -> dict:
    """Iterate this rank's input for the given epochs; return each epoch's rows and seconds."""
    import numpy as np
    import pyarrow.parquet as pq
    import tensorflow as tf

    ctx = raytf.get_context()
    way, batch = config["way"], int(config["batch_size"])
    per_replica = batch // ctx.num_replicas

    def from_file():
        cols = pq.read_table(config["path"]).to_pydict()
        out = train_ray_data.preprocess({k: np.asarray(v) for k, v in cols.items()})
        return {k: v[ctx.rank :: ctx.world_size] for k, v in out.items()}

    if way == "ray_data":
        ds = ctx.get_dataset_shard("train").to_tf("x", "label", global_batch_size=batch)
    elif way == "tf_data_file":
        spec = (
            tf.TensorSpec((per_replica, 32), tf.float32),
            tf.TensorSpec((per_replica,), tf.int32),
        )

        def gen():
            rows = from_file()
            for i in range(0, len(rows["label"]) - per_replica + 1, per_replica):
                yield rows["x"][i : i + per_replica], rows["label"][i : i + per_replica]

        ds = tf.data.Dataset.from_generator(gen, output_signature=spec).prefetch(2)
    else:
        rows = from_file()
        ds = (
            tf.data.Dataset.from_tensor_slices((rows["x"], rows["label"]))
            .batch(per_replica, drop_remainder=True)
            .prefetch(2)
        )
    epochs = []
    for _ in range(int(config["epochs"])):
        t0, n = time.perf_counter(), 0
        for x, _y in ds:
            n += int(x.shape[0])
        epochs.append((n, time.perf_counter() - t0))
        ctx.step_end(len(epochs))
    return {"epochs": epochs}


def run_way(way: str, args, path: str, storage: str) -> dict:
    datasets = None
    if way == "ray_data":
        datasets = train_ray_data.make_datasets(path)
    result = raytf.Trainer(
        read_loop,
        train_loop_config={
            "way": way,
            "path": path,
            "batch_size": args.batch_size,
            "epochs": args.epochs,
        },
        datasets=datasets,
        scaling_config=raytf.ScalingConfig(num_workers=args.workers),
        run_config=raytf.RunConfig(name=f"throughput-{way}", storage_path=storage, verbose=0),
    ).fit()
    per_rank = [r["epochs"] for r in result.worker_results]
    rates = []
    for e in range(args.epochs):
        rows = sum(epochs[e][0] for epochs in per_rank)
        rates.append(rows / max(epochs[e][1] for epochs in per_rank))
    return {
        "first_epoch_examples_s": round(rates[0]),
        "examples_s": round(statistics.median(rates[1:] or rates)),
        "epochs_examples_s": [round(r) for r in rates],
        "rows_per_epoch": sum(epochs[0][0] for epochs in per_rank),
        "epoch_s": [round(max(epochs[e][1] for epochs in per_rank), 2) for e in range(args.epochs)],
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rows", type=int, default=8192, help="rows in the Parquet file")
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--storage", default=None)
    args = p.parse_args(argv)
    storage = args.storage or tempfile.mkdtemp(prefix="raytf-throughput-")
    ensure_ray(min_cpus=args.workers + 2)
    name = f"synthetic-{args.rows}.parquet"
    path = train_ray_data.write_parquet(os.path.join(storage, "data", name), 0, args.rows)
    out = {way: run_way(way, args, path, storage) for way in args.ways.split(",")}
    out["cpus"] = os.cpu_count()
    out["rows"] = args.rows
    out["workers"] = args.workers
    print(json.dumps(out, sort_keys=True), flush=True)
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
