"""The training runs that bench/run.py measures, one per fresh process.

``python bench/workloads.py KIND [options]`` trains and prints one line
``BENCH_RESULT {json}``; run.py reads it from the process's (or launched task's) output, so the
same reporting works for plain subprocesses, every task of a launched cluster, and R.

Kinds:
  digits      the R-overhead model (digits MLP) trained with tfd.fit, fit call timed
  cnn         small CNN on synthetic 28x28x1 images; Keras 3 via tfd.fit under
              make_strategy("auto") (multi_worker_mirrored under launch, default alone), or
              tf_keras + MultiWorkerMirroredStrategy with --legacy; --max-replica-batch M
              passes fit(max_replica_batch=M) (the global batch in accumulated steps)
  mirrored    the CNN under make_strategy("mirrored", num_cpu_devices=N) in one process
  ps          digits MLP, parameter-server chief: tfd.fit, or tf_keras fit + DatasetCreator
              with --legacy
  passes      digits MLP under make_strategy("mirrored") of 2 logical CPUs: Keras' own fit with
              validation every epoch, then evaluate, timed whole (wall and this process's CPU):
              every pass over the data makes its input iterators (the repair
              one_iterator_per_pass, or Keras' own code under
              TFDISTRIBUTED_DISABLE_COMPAT=one_iterator_per_pass)

Throughput is measured from the end of epoch 1 to the end of the last epoch: epoch 1 holds
tracing, strategy start-up and the first collective handshakes, which are start-up, not speed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

RESULT_TAG = "BENCH_RESULT"


def emit(**values):
    print(f"{RESULT_TAG} {json.dumps(values)}", flush=True)


def import_keras(legacy: bool):
    if legacy:
        # Must precede the first TensorFlow import, or tf.distribute binds to Keras 3.
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    return keras


def make_timer(keras):
    """A callback recording wall-clock marks, for any Keras (3 or tf_keras).

    Only batch *begin* is hooked: overriding ``on_train_batch_end`` turns off Keras 3's
    asynchronous batch-end dispatch, which would slow the Keras 3 side only.
    """

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            # tf_keras would otherwise convert logs to NumPy (a device sync) at every hooked batch.
            self._supports_tf_logs = True
            self.first_step = None
            self.marks = []  # (epoch, batch, wall clock) of every batch begin
            self.epoch = 0
            self.batches_in_epoch = 0
            self.epochs = []  # (wall clock at epoch end, batches in that epoch)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            self.marks.append((self.epoch, int(batch), time.time()))
            if self.first_step is None:
                self.first_step = time.time()
            self.batches_in_epoch = max(self.batches_in_epoch, int(batch) + 1)

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append((time.time(), self.batches_in_epoch))
            self.batches_in_epoch = 0

        def steady(self, steps_per_epoch=None):
            """``(steps, seconds)`` from the end of epoch 1 to the end of the last epoch."""
            if len(self.epochs) < 2:
                raise RuntimeError("need at least 2 epochs to measure past the first one")
            steps = sum(steps_per_epoch or n for _, n in self.epochs[1:])
            return steps, self.epochs[-1][0] - self.epochs[0][0]

        def step_times(self):
            """Past epoch 1: ``(times between batches inside an epoch, epoch-boundary gaps)``.

            A boundary gap runs from the last batch of an epoch to the first of the next, so it
            holds one step plus whatever Keras and tf.data do between epochs.
            """
            inside, boundary = [], []
            for (e0, _, t0), (e1, _, t1) in zip(self.marks, self.marks[1:]):
                if e1 >= 1:
                    (inside if e0 == e1 else boundary).append(t1 - t0)
            return inside, boundary

    return Timer()


def step_summary(timer, steps_per_execution=1) -> dict:
    """Median step and epoch-boundary costs in ms, for the profile tool."""
    import numpy as np

    inside, boundary = timer.step_times()
    step = float(np.median(inside)) / steps_per_execution * 1000 if inside else None
    return {"step_ms": step,
            "epoch_gap_ms": float(np.median(boundary)) * 1000 if boundary else None,
            "epoch_gaps_ms": [round(g * 1000, 1) for g in boundary]}


class Profiling:
    """``--profile DIR``: a TensorFlow profiler trace of a window of steps, plus the collectives.

    The trace covers batches ``start .. start + steps`` of epoch 2 (index 1), past tracing and
    start-up, and lands in ``DIR/<task>``. The collectives are recorded as TensorFlow builds them
    (``collective_ops.all_reduce_v2``, which both Keras 3 and tf_keras reach through
    ``tf.distribute``): op name, element count and dtype, so the trace's events can be matched
    to what they move.
    """

    def __init__(self, keras, directory, start=5, steps=20):
        import tensorflow as tf
        from tensorflow.python.ops import collective_ops

        self.tf, self.directory, self.window = tf, directory, (start, start + steps)
        self.collectives = []
        original = collective_ops.all_reduce_v2

        def recording(t, *args, **kwargs):
            out = original(t, *args, **kwargs)
            graph = getattr(out, "graph", None)
            self.collectives.append({
                "op": out.op.name if hasattr(out, "op") else "eager",
                "graph": getattr(graph, "name", "eager"),
                "elements": int(t.shape.num_elements() or 0) if t.shape.is_fully_defined() else None,
                "bytes_per_element": t.dtype.size})
            return out

        collective_ops.all_reduce_v2 = recording
        outer = self

        class Window(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_begin(self, batch, logs=None):
                if self.epoch != 1:
                    return
                if batch == outer.window[0]:
                    tf.profiler.experimental.start(outer.directory, options=tf.profiler.experimental
                                                   .ProfilerOptions(host_tracer_level=2))
                elif batch == outer.window[1]:
                    tf.profiler.experimental.stop()

        self.callback = Window()

    def report(self, **timings):
        """Writes ``collectives.json`` beside the trace; the result line only names the folder
        (launch() shortens very long output lines)."""
        with open(os.path.join(self.directory, "collectives.json"), "w") as f:
            json.dump({"collectives": self.collectives, "window": list(self.window), **timings},
                      f)
        return {"profile_dir": self.directory}


def cnn(keras):
    # Two small convolutions: ~0.04 M parameters (cheap to all-reduce) but ~2.5 M multiply-adds
    # per image forward, so a step is dominated by compute, as the scaling benchmark needs.
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def cnn_heavy(keras):
    # The compute-heavier workload: three convolutions, ~0.07 M parameters (about twice the
    # gradients of `cnn`) but ~14.5 M multiply-adds per image forward, ~6x `cnn`. A step is
    # then far longer than an all-reduce, as on a real model where workers pay off.
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


MODELS = {"cnn": cnn, "heavy": cnn_heavy}


def digits_mlp(keras):
    return keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def compile_model(model, keras, steps_per_execution=1):
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution)
    return model


def synthetic_images(n, seed=0):
    """Random 28x28x1 images and labels, identical in every process (same seed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return (rng.random((n, 28, 28, 1), dtype=np.float32),
            rng.integers(0, 10, size=n).astype(np.int32))


def run_digits(ns):
    import keras

    import tfdistributed as tfd

    strategy = tfd.make_strategy(ns.strategy)
    (x, y), _ = tfd.digits_arrays()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(digits_mlp(keras), keras)
    start = time.perf_counter()
    tfd.fit(model, x, y, epochs=ns.epochs, batch_size=ns.batch, seed=0, verbose=0)
    emit(fit_seconds=time.perf_counter() - start, via="python")


def run_cnn(ns):
    keras = import_keras(ns.legacy)
    import tensorflow as tf

    if ns.legacy:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        import tfdistributed as tfd

        strategy = tfd.make_strategy("auto")
    replicas = strategy.num_replicas_in_sync
    global_batch = ns.batch * replicas
    x, y = synthetic_images(ns.examples_per_replica * replicas)
    keras.utils.set_random_seed(0)
    profiling = None
    if ns.profile:
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
        profiling = Profiling(keras, os.path.join(ns.profile, f"{task.get('type', 'single')}-"
                                                              f"{task.get('index', 0)}"))
    with strategy.scope():
        model = compile_model(MODELS[ns.model](keras), keras, ns.steps_per_execution)
    timer = make_timer(keras)
    callbacks = [timer] + ([profiling.callback] if profiling else [])
    if ns.legacy:
        # TensorFlow's multi-worker tutorial, as a tf_keras user writes it: a dataset of global
        # batches, auto-sharded by data, and model.fit.
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        dataset = dataset.batch(global_batch).with_options(options)
        model.fit(dataset, epochs=ns.epochs, callbacks=callbacks, verbose=0)
    else:
        tfd.fit(model, x, y, epochs=ns.epochs, batch_size=global_batch, seed=0,
                callbacks=callbacks, verbose=0, max_replica_batch=ns.max_replica_batch)
    # With max_replica_batch each update is `accumulated` steps of global_batch / accumulated.
    accumulated = 1 if ns.max_replica_batch is None else \
        tfd.training.replica_batch.accumulation_steps(global_batch, replicas,
                                                      ns.max_replica_batch)
    step_batch = global_batch // accumulated
    # With blocks of steps Keras reports one batch per block: count the steps from the data.
    steps, seconds = timer.steady(steps_per_epoch=-(-ns.examples_per_replica * replicas
                                                    // step_batch)
                                  if ns.steps_per_execution > 1 else None)
    summary = step_summary(timer, ns.steps_per_execution)
    emit(examples_per_second=steps * step_batch / seconds, steps=steps, seconds=seconds,
         global_batch=global_batch, replicas=replicas, first_step=timer.first_step,
         params=model.count_params(), accumulated=accumulated,
         peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
         **(profiling.report(**summary) if profiling else summary))


def run_mirrored(ns):
    import keras

    import tfdistributed as tfd

    strategy = tfd.make_strategy("mirrored", num_cpu_devices=ns.devices)
    global_batch = ns.batch * strategy.num_replicas_in_sync
    x, y = synthetic_images(ns.examples_per_replica * strategy.num_replicas_in_sync)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(cnn(keras), keras)
    timer = make_timer(keras)
    tfd.fit(model, x, y, epochs=ns.epochs, batch_size=global_batch, seed=0, callbacks=[timer],
            verbose=0)
    steps, seconds = timer.steady()
    emit(examples_per_second=steps * global_batch / seconds, steps=steps, seconds=seconds,
         global_batch=global_batch, replicas=strategy.num_replicas_in_sync)


def run_ps(ns):
    keras = import_keras(ns.legacy)
    import tensorflow as tf

    import tfdistributed as tfd

    (x, y), _ = tfd.digits_arrays()
    if ns.legacy:
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
    else:
        strategy = tfd.make_strategy("parameter_server")
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(digits_mlp(keras), keras)
    timer = make_timer(keras)
    if ns.legacy:
        def dataset_fn(context):
            # TensorFlow's documented recipe for Keras fit under ParameterServerStrategy.
            batch = context.get_per_replica_batch_size(ns.batch)
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
            return dataset.shuffle(len(x), seed=0).repeat().batch(batch, drop_remainder=True) \
                .prefetch(2)

        model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=ns.epochs,
                  steps_per_epoch=ns.steps, callbacks=[timer], verbose=0)
    else:
        tfd.fit(model, x, y, epochs=ns.epochs, batch_size=ns.batch, steps_per_epoch=ns.steps,
                seed=0, callbacks=[timer], verbose=0)
    # Parameter-server steps are asynchronous: only epoch boundaries are observable on the chief.
    steps, seconds = timer.steady(steps_per_epoch=ns.steps)
    emit(steps_per_second=steps / seconds, steps=steps, seconds=seconds)


def run_passes(ns):
    import keras
    import numpy as np

    import tfdistributed as tfd

    strategy = tfd.make_strategy("mirrored", num_cpu_devices=2)
    (x, y), (xt, yt) = tfd.digits_arrays()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(digits_mlp(keras), keras)
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(x, y, epochs=ns.epochs, batch_size=ns.batch, validation_data=(xt, yt), verbose=0)
    loss = model.evaluate(xt, yt, batch_size=ns.batch, verbose=0, return_dict=True)["loss"]
    emit(seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu,
         passes=2 * ns.epochs + 1, loss=float(loss),
         weights_sum=float(sum(np.sum(w, dtype="float64") for w in model.get_weights())))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("digits")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--strategy", default="default")
    p.set_defaults(run=run_digits)
    p = sub.add_parser("cnn")
    p.add_argument("--legacy", action="store_true")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--batch", type=int, default=64, help="per replica")
    p.add_argument("--examples-per-replica", type=int, required=True)
    p.add_argument("--model", choices=sorted(MODELS), default="cnn")
    p.add_argument("--steps-per-execution", type=int, default=1)
    p.add_argument("--max-replica-batch", type=int, default=None,
                   help="fit(max_replica_batch=): accumulate instead of a larger replica batch")
    p.add_argument("--profile", metavar="DIR", help="trace 20 steps of epoch 2 into DIR/<task>")
    p.set_defaults(run=run_cnn)
    p = sub.add_parser("mirrored")
    p.add_argument("--devices", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--batch", type=int, default=64, help="per replica")
    p.add_argument("--examples-per-replica", type=int, required=True)
    p.set_defaults(run=run_mirrored)
    p = sub.add_parser("ps")
    p.add_argument("--legacy", action="store_true")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=64)
    p.set_defaults(run=run_ps)
    p = sub.add_parser("passes")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--batch", type=int, default=64, help="global")
    p.set_defaults(run=run_passes)
    ns = parser.parse_args(argv)
    ns.run(ns)


if __name__ == "__main__":
    main()
