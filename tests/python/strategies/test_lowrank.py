"""Low-rank gradients (PowerSGD): the options and their refusals, which tensors go low-rank, and
the math of the two all-reduces on 2 replicas of this process (error feedback keeps what
compression drops, every replica gets the same update, the warm-up is the plain mean, a resized
job starts afresh). Real multi-worker jobs: test_multiworker.py, test_self_healing.py (resume
from a backup), test_hosts.py (2 hosts), test_conformance.py (its CONFORMANCE.md column)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.strategies import lowrank
from tfdistributed.strategies.compression import canonical_compression


@pytest.mark.parametrize("kwargs,message", [
    ({"rank": 0}, r"`rank` must be >= 1, got 0"),
    ({"rank": 2.0}, r"`rank` must be an integer, got float 2.0: pass 2 as an integer"),
    ({"rank": "4"}, r"`rank` must be an integer, got str '4'"),
    ({"warmup_steps": -1}, r"`warmup_steps` must be >= 0"),
    ({"warmup_steps": 10.5}, r"`warmup_steps` must be an integer"),
    ({"min_compression_rate": 0.5}, r"`min_compression_rate` must be a number >= 1, got 0.5"),
    ({"min_compression_rate": "2"}, r"`min_compression_rate` must be a number >= 1"),
    ({"error_feedback": "yes"}, r"`error_feedback` must be True or False, got 'yes'"),
    ({"warm_start": 1}, r"`warm_start` must be True or False, got 1"),
])
def test_powersgd_options_are_refused_by_name(kwargs, message):
    with pytest.raises(tfd.ArgumentTypeError, match=message):
        tfd.powersgd(**kwargs)


def test_powersgd_defaults_are_ddps_but_the_rank():
    options = tfd.powersgd()
    assert options == tfd.PowerSGD(rank=4, warmup_steps=1000, min_compression_rate=2.0,
                                   error_feedback=True, warm_start=True)
    assert tfd.powersgd(min_compression_rate=3).min_compression_rate == 3.0


@pytest.mark.parametrize("value", ["powersgd", "PowerSGD", "power_sgd", tfd.powersgd(rank=1)])
def test_powersgd_spellings(value):
    assert canonical_compression(value) == "powersgd"


@pytest.mark.parametrize("name", ["default", "mirrored", "one_device", "central_storage"])
@pytest.mark.parametrize("value", ["powersgd", tfd.powersgd(rank=2)])
def test_powersgd_without_a_cross_worker_all_reduce_is_refused(name, value):
    with pytest.raises(tfd.StrategyError, match=rf"`gradient_compression` applies to "
                                                rf"'multi_worker_mirrored'.*'{name}' has no"):
        tfd.make_strategy(name, gradient_compression=value)
    with pytest.raises(tfd.StrategyError, match="has no such all-reduce"):
        tfd.set_gradient_compression(tfd.make_strategy(name), value)


def test_auto_ignores_powersgd_on_a_local_strategy_and_never_picks_it():
    with pytest.warns(UserWarning, match=r"`gradient_compression='powersgd'` is ignored: 'auto' "
                                         r"chose 'default'"):
        strategy = tfd.make_strategy("auto", gradient_compression="powersgd")
    assert tfd.gradient_compression(strategy) is None
    assert tfd.gradient_compression(tfd.make_strategy("auto")) is None


def test_strategy_info_shows_the_options():
    strategy = tfd.make_strategy("multi_worker_mirrored",
                                 gradient_compression=tfd.powersgd(rank=2, warmup_steps=10))
    info = tfd.strategy_info(strategy)
    assert info["gradient_compression"] == "powersgd"
    assert info["powersgd"] == {"rank": 2, "warmup_steps": 10, "min_compression_rate": 2.0,
                                "error_feedback": True, "warm_start": True}
    tfd.set_gradient_compression(strategy, "fp16")
    assert tfd.strategy_info(strategy)["powersgd"] is None
    tfd.set_gradient_compression(strategy, "powersgd")
    assert tfd.strategy_info(strategy)["powersgd"]["rank"] == 4


def test_matrices_go_low_rank_on_their_smaller_side_vectors_and_small_ones_whole():
    options = tfd.powersgd(rank=4)
    assert lowrank.matrix_shape((784, 1280), options) == (784, 1280, False)
    assert lowrank.matrix_shape((1280, 10), options) == (10, 1280, True)
    # A convolution kernel (kh, kw, in, out) is the matrix (kh * kw * in, out).
    assert lowrank.matrix_shape((3, 3, 16, 32), options) == (32, 144, True)
    assert lowrank.matrix_shape((1280,), options) is None
    # 16 x 16 = 256 elements, (16 + 16) x 4 = 128 sent: a rate of 2, just enough; 15 x 16 not.
    assert lowrank.matrix_shape((16, 16), options) == (16, 16, False)
    assert lowrank.matrix_shape((15, 16), options) is None
    # The wide MLP of bench/netbound.py: 2.66 M elements, 34.5 thousand sent (77x fewer).
    mlp = [(784, 1280), (1280,), (1280, 1280), (1280,), (1280, 10), (10,)]
    assert lowrank.wire_elements(mlp, options) == (
        (2 * 784 + 1280) * 4 + 1280 + (2 * 1280 + 1280) * 4 + 1280 + (2 * 10 + 1280) * 4 + 10)
    assert lowrank.wire_elements(mlp, tfd.powersgd(rank=4, error_feedback=False)) == (
        (784 + 1280) * 4 + 1280 + (1280 + 1280) * 4 + 1280 + (10 + 1280) * 4 + 10)


SHAPES = [(6, 5), (5,), (3, 3, 2, 4)]  # a matrix, a vector, a convolution kernel
COUNTS = (3.0, 1.0)  # an uneven batch: replica 0 has 3 of its 4 examples


def _job(options):
    """``step(t, grads_0, grads_1)`` running PowerSGD's all-reduce of one train step on the 2
    replicas of a ``mirrored`` strategy of this process (what a 2-worker job's replicas do),
    with its state; returns ``(step, state, strategy)``."""
    import tensorflow as tf

    strategy = tfd.make_strategy("mirrored")
    with strategy.scope():
        variables = [tf.Variable(tf.zeros(shape)) for shape in SHAPES]
        state = lowrank.build_state(variables, list(range(len(SHAPES))), options)
    entries = [state.entries.get(i) for i in range(len(SHAPES))]

    @tf.function
    def step(t, grads_0, grads_1):
        def replica():
            context = tf.distribute.get_replica_context()
            first = tf.equal(context.replica_id_in_sync_group, 0)
            grads = [tf.where(first, a, b) for a, b in zip(grads_0, grads_1)]
            local = tf.where(first, COUNTS[0], COUNTS[1])
            means, sums = lowrank.powersgd_all_reduce(context, grads, entries, state, local,
                                                      [local * 10.0], t)
            return means, sums

        return strategy.run(replica)

    return step, state, strategy


def _run(step, strategy, steps, seed=0):
    """Runs ``steps`` steps of random gradients: per step, both replicas' means (as numpy)
    and the global means one device would apply (Keras' per-replica gradients are the local
    mean over R: the global mean weights them by n_r R / N)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        grads = [[rng.standard_normal(s).astype("float32") for s in SHAPES] for _ in range(2)]
        means, sums = step(tf.constant(t, tf.int64), *[[tf.constant(g) for g in gs]
                                                        for gs in grads])
        per_replica = [[r.numpy() for r in strategy.experimental_local_results(m)] for m in means]
        total = sum(COUNTS)
        expected = [2 * (COUNTS[0] * a + COUNTS[1] * b) / total for a, b in zip(*grads)]
        assert [float(r) for r in strategy.experimental_local_results(sums[0])] == [40.0, 40.0]
        out.append((per_replica, expected))
    return out


def _errors_summed(state, strategy):
    """Each compressed matrix's error buffers summed over the replicas, in its gradient's shape."""
    return {i: entry.as_gradient(sum(v.numpy() for v in strategy.experimental_local_results(
        entry.error.value))).numpy() for i, entry in state.entries.items()}


def test_error_feedback_keeps_what_compression_drops():
    # Over any number of steps, what was applied plus what the error buffers still hold is the
    # sum of the true global means: compression delays part of the gradient, loses none of it.
    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=0))
    assert sorted(state.entries) == [0, 2]  # the vector goes whole
    steps = _run(step, strategy, 6)
    applied = [sum(s[0][i][0] for s in steps) for i in range(len(SHAPES))]
    true = [sum(s[1][i] for s in steps) for i in range(len(SHAPES))]
    errors = _errors_summed(state, strategy)
    for i in (0, 2):
        np.testing.assert_allclose(applied[i] + errors[i], true[i], atol=1e-5)
        # Rank 1 drops a lot per step: without the errors the sums would be far apart.
        assert np.abs(applied[i] - true[i]).max() > 0.5
    np.testing.assert_allclose(applied[1], true[1], rtol=1e-5)  # whole: exact
    for per_replica, _ in steps:  # every replica applies the same update, bit for bit
        for replicas in per_replica:
            np.testing.assert_array_equal(replicas[0], replicas[1])


def test_without_error_feedback_nothing_is_kept_and_a_full_rank_sends_it_all():
    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=0, error_feedback=False))
    assert all(entry.error is None for entry in state.entries.values())
    _run(step, strategy, 2)
    # Rank 4 of a 4-row matrix (the kernel) is exact; min_compression_rate=1 lets it be sent so.
    step, state, strategy = _job(tfd.powersgd(rank=4, warmup_steps=0, min_compression_rate=1))
    for per_replica, expected in _run(step, strategy, 3):
        np.testing.assert_allclose(per_replica[2][0], expected[2], atol=1e-5)


def test_the_warm_up_is_the_plain_mean_then_compression_starts():
    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=2))
    steps = _run(step, strategy, 3)
    for per_replica, expected in steps[:2]:
        for replicas, want in zip(per_replica, expected):
            np.testing.assert_allclose(replicas[0], want, rtol=1e-5, atol=1e-6)
    assert np.abs(steps[2][0][0][0] - steps[2][1][0]).max() > 0.1  # rank 1 from step 2 on
    errors = _errors_summed(state, strategy)
    np.testing.assert_allclose(steps[2][0][0][0] + errors[0], steps[2][1][0], atol=1e-5)


def test_a_backup_keeps_the_errors_mean_and_restoring_gives_it_to_every_replica():
    # What Keras' save_weights reads (cross-replica) and load_weights assigns: the update of the
    # next steps depends on the errors only through their sum, which this keeps.
    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=0))
    _run(step, strategy, 2)
    entry = state.entries[0]
    local = [v.numpy() for v in strategy.experimental_local_results(entry.error.value)]
    saved = entry.error.numpy()
    np.testing.assert_allclose(saved, (local[0] + local[1]) / 2, rtol=1e-6)
    entry.error.assign(saved)
    restored = [v.numpy() for v in strategy.experimental_local_results(entry.error.value)]
    np.testing.assert_array_equal(restored[0], saved)
    np.testing.assert_array_equal(restored[1], saved)
    q = [v.numpy() for v in strategy.experimental_local_results(entry.q.value)]
    np.testing.assert_array_equal(entry.q.numpy(), q[0])  # the same everywhere: no collective


def test_a_state_built_for_another_number_of_replicas_starts_afresh_and_says_so(capfd):
    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=0))
    _run(step, strategy, 2)
    assert "PowerSGD" not in capfd.readouterr().err  # built for these 2 replicas: said nothing
    state.replicas.assign(4.0)  # as a backup of a 4-replica job restores it
    for entry in state.entries.values():
        entry.error.assign(np.full(entry.error.shape, 1e6, "float32"))
    steps = _run(step, strategy, 1)
    assert ("PowerSGD's state (error feedback, Q matrices) was built for 4 replicas and this job "
            "has 2 (a resized job): it starts afresh") in capfd.readouterr().err
    assert float(state.replicas.numpy()) == 2.0
    errors = _errors_summed(state, strategy)
    # The errors of the old job were dropped, not fed in: the step is a fresh one.
    np.testing.assert_allclose(steps[0][0][0][0] + errors[0], steps[0][1][0], atol=1e-5)


def test_embedding_rows_go_whole_and_stay_rows():
    # An embedding's gradient (IndexedSlices: the rows a step touched) is summed as rows, in the
    # warm-up and after it: Keras' optimizers update only those rows, a dense update would not.
    import tensorflow as tf

    strategy = tfd.make_strategy("mirrored")
    options = tfd.powersgd(rank=1, warmup_steps=1)
    with strategy.scope():
        variables = [tf.Variable(tf.zeros((40, 8))), tf.Variable(tf.zeros((6, 5)))]
        state = lowrank.build_state(variables, [0, 1], options)
    entries = [state.entries.get(0), state.entries.get(1)]
    assert entries[0] is not None  # a matrix by its shape; its gradient decides

    @tf.function
    def step(t):
        def replica():
            context = tf.distribute.get_replica_context()
            first = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), tf.float32)
            rows = tf.IndexedSlices(tf.ones((2, 8)) * (1.0 + first), tf.constant([3, 7]),
                                    tf.constant([40, 8]))
            means, _ = lowrank.powersgd_all_reduce(context, [rows, tf.ones((6, 5)) * first],
                                                   entries, state, tf.constant(2.0), [], t)
            return means[0].values, means[0].indices

        return strategy.run(replica)

    for t in range(2):
        values, indices = step(tf.constant(t, tf.int64))
        got_values = strategy.experimental_local_results(values)[0].numpy()
        got_indices = strategy.experimental_local_results(indices)[0].numpy()
        # Both replicas' rows, each weighted by its half of the examples: (2 + 1) rows of 1s.
        dense = np.zeros((40, 8), "float32")
        np.add.at(dense, got_indices, got_values)
        assert sorted(set(got_indices.tolist())) == [3, 7]
        np.testing.assert_allclose(dense[[3, 7]], np.full((2, 8), 3.0), rtol=1e-6)


def test_a_step_that_is_not_finite_leaves_the_state_as_it_was():
    # What a loss-scaling optimizer skips (an fp16 scale too high) must not poison the errors.
    import tensorflow as tf

    step, state, strategy = _job(tfd.powersgd(rank=1, warmup_steps=0))
    _run(step, strategy, 2)
    before = [(entry.q.numpy(), _errors_summed(state, strategy)[i])
              for i, entry in state.entries.items()]
    bad = [np.full(s, np.inf, "float32") for s in SHAPES]
    means, _ = step(tf.constant(2, tf.int64), [tf.constant(g) for g in bad],
                    [tf.constant(g) for g in bad])
    assert not np.isfinite(strategy.experimental_local_results(means[0])[0].numpy()).all()
    after = [(entry.q.numpy(), _errors_summed(state, strategy)[i])
             for i, entry in state.entries.items()]
    for (q0, e0), (q1, e1) in zip(before, after):
        np.testing.assert_array_equal(q0, q1)
        np.testing.assert_array_equal(e0, e1)


def test_the_state_is_saved_with_the_optimizer_and_reset_when_the_job_shrinks(tmp_path, capfd):
    # A one-worker multi-worker strategy of this process (1 replica): the state is made with the
    # optimizer and saved with its weights, apart from the optimizer's own variables (a backup
    # loads whole into an optimizer without PowerSGD, and the other way round); a backup of a
    # 2-replica job restored here (an elastic shrink to one worker) starts afresh, and says so.
    import h5py
    import keras

    def model_under(strategy):
        keras.utils.set_random_seed(1)
        with strategy.scope():
            model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(16),
                                      keras.layers.Dense(2)])
            model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return model

    x, y = np.ones((32, 8), "float32"), np.zeros((32, 2), "float32")
    model = model_under(tfd.make_strategy(
        "multi_worker_mirrored", gradient_compression=tfd.powersgd(rank=1, warmup_steps=0)))
    plain = model_under(tfd.make_strategy("default"))
    for m in (model, plain):
        tfd.fit(m, x, y, epochs=1, batch_size=16, verbose=0)
    state = model.optimizer._tfd_powersgd
    assert len(model.optimizer.variables) == len(plain.optimizer.variables) == 10
    assert float(state.replicas.numpy()) == 1.0
    state.replicas.assign(2.0)  # what a backup of a 2-replica job holds
    first = next(iter(state.entries.values()))
    first.error.assign(np.ones((8, 16), "float32"))
    model.save_weights(tmp_path / "backup.weights.h5")
    with h5py.File(tmp_path / "backup.weights.h5") as f:
        assert len(f["optimizer/_tfd_powersgd/vars"]) == 3  # replicas, Q, error
    with warnings.catch_warnings(record=True) as seen:  # the optimizer's own load: none skipped
        warnings.simplefilter("always")
        plain.load_weights(tmp_path / "backup.weights.h5")
    assert not [w for w in seen if "Skipping" in str(w.message)]
    assert int(plain.optimizer.iterations.numpy()) == 2
    state.replicas.assign(1.0)
    model.load_weights(tmp_path / "backup.weights.h5")
    assert float(state.replicas.numpy()) == 2.0  # restored with the optimizer
    capfd.readouterr()
    tfd.fit(model, x, y, epochs=1, batch_size=16, verbose=0)
    assert ("was built for 2 replicas and this job has 1 (a resized job): it starts afresh"
            in capfd.readouterr().err)
    assert float(state.replicas.numpy()) == 1.0
    assert not first.error.numpy().any()
