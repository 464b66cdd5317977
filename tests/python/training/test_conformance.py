"""Keras features x strategies: every cell matches the default strategy, or raises our error.

The cells (``conformance.py``) are trained the way users write Keras: many layer kinds, fit
arguments, callbacks and metrics, ``tfdistributed.fit`` and plain ``model.fit``. The in-process
strategies run in this pytest process (2 logical CPUs); ``multi_worker_mirrored`` is a real
2-worker cluster and ``parameter_server`` a real chief + worker + ps cluster, each running every
cell in one launched job. The table in ``CONFORMANCE.md`` is generated from these results.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

import conformance
import tfdistributed as tfd

pytestmark = pytest.mark.cluster

IN_PROCESS = ("default", "one_device", "mirrored", "central_storage")
# The compressed columns: the 2-worker cluster with gradient_compression="fp16", then powersgd.
COMPRESSED = "multi_worker_mirrored fp16"
LOW_RANK = "multi_worker_mirrored powersgd"
CLUSTERS = ("multi_worker_mirrored", COMPRESSED, LOW_RANK, "parameter_server")
STRATEGIES = IN_PROCESS + CLUSTERS
FEATURES = conformance.features()
# Measured: 2 replicas or 2 workers sum gradients in another order than one device; after the
# cells' 20-30 steps the weights differ by < 2e-6 relative, the reported losses by < 1e-6.
RTOL, ATOL = 2e-5, 2e-6
# Synchronized batch normalization computes the global variance from all-reduced sums of x and
# x^2 instead of from the batch itself: its moving variance, and so `evaluate`, moves by ~6e-5.
FEATURE_RTOL = {"sync_batchnorm": 5e-4}
# Plain BatchNormalization keeps moving statistics per replica (TensorFlow's documented
# behaviour; `synchronized=True` shares them): workers agree on every trainable weight only.
PER_REPLICA_STATE = {"batchnorm"}
# fp16 gradients are rounded to 11 significant bits at every step: after the cells' 20-30
# Adam steps the losses move by ~1e-5 relative, a weight whose gradient is near zero by ~1e-4
# absolute (Adam normalises each element; test_multiworker.py measured the digits model), and
# an accuracy by a prediction that flips (1 of the 450 test digits: 2.4e-3 relative, seen in
# validation_freq_steps). Stated tolerances: relative for every number (2 flipped predictions),
# absolute for the weights.
COMPRESSED_RTOL, COMPRESSED_ATOL = 5e-3, 1e-2
# PowerSGD (rank 4, the cells' first 10 steps in 32 bits, the other 10-20 low-rank) follows
# another path to a similar model: its weights are not compared. Seen (2026-11-26): every loss
# (history, validation, evaluate) within 9.3% of the default's (evaluate of `embedding`),
# accuracy and the other metrics within 0.016. Stated tolerances, about twice that: losses
# relative, metrics absolute.
LOW_RANK_LOSS_RTOL, LOW_RANK_METRIC_ATOL = 0.2, 0.04
# Features a strategy cannot support, with the error we raise (module tfdistributed.*), before
# training: Keras' options that cannot be honoured there (tfdistributed.training.options).
_NOT_A_NUMBER = "steps_per_execution='auto', which is not a number of steps"
_NO_XLA = "jit_compile=True (XLA) cannot be honoured"
EXPECTED_ERRORS: dict[tuple[str, str], str] = {
    **{(s, "steps_per_execution_auto"): _NOT_A_NUMBER
       for s in IN_PROCESS + ("multi_worker_mirrored", "parameter_server")},
    **{(s, "jit_compile"): _NO_XLA
       for s in ("mirrored", "central_storage", "multi_worker_mirrored", "parameter_server")},
    ("parameter_server", "run_eagerly"): "run_eagerly=True cannot be honoured",
}
# Under parameter-server training every worker repeats its own input pipeline: an epoch of
# `steps_per_epoch` steps does not stop where one device's does (with one worker, every other
# cell is step for step the same as one device, and is compared exactly).
PS_NOT_EXACT = {"steps_and_initial_epoch"}


REPORT = Path(conformance.TABLE).parent / ".logs" / "conformance-cpu.json"


def _exact(strategy, feature) -> bool:
    if FEATURES[feature] != conformance.EXACT:
        return False
    return strategy != "parameter_server" or feature not in PS_NOT_EXACT


def _cluster_cells(root) -> dict:
    # The three multi-worker columns in one job: one cluster start-up for the three.
    job = tfd.launch(conformance.run_multi_worker_cells, workers=2, args=(str(root / "mwms"),),
                     timeout=2400, watch=tfd.Watch(echo=False))
    results = {}
    for column, compression in (("multi_worker_mirrored", "none"), (COMPRESSED, "fp16"),
                                (LOW_RANK, "powersgd")):
        results.update(zip((column, f"{column}:worker 1"), (v[compression] for v in job.values)))
    job = tfd.launch(conformance.run_cells, tfd.Scaling(workers=1, ps=1, chief=True),
                     args=("auto", str(root / "ps")), timeout=900, watch=tfd.Watch(echo=False))
    results["parameter_server"] = job.values[0]
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    # The cluster jobs run while this process trains the in-process cells: alone, either one
    # left a core of the two idle about half the time (waiting on processes and collectives).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        clusters = pool.submit(_cluster_cells, root)
        results = {name: conformance.run_cells(name, str(root / name),
                                               conformance.column_features(name))
                   for name in IN_PROCESS}
        results.update(clusters.result())
    _write_costs(results)
    results["_roots"] = {"multi_worker_mirrored": str(root / "mwms" / "none")}
    return results


def _write_costs(results) -> None:
    """CPU seconds of every cell (one process's: each worker's for the 2-worker columns, the
    coordinator's for parameter_server), by column and feature, costliest first: the suite's
    costliest fixture, to read before adding a row."""
    costs = {column: dict(sorted(((f, round(r.get("cpu_seconds", 0.0), 1))
                                  for f, r in cells.items()), key=lambda kv: -kv[1]))
             for column, cells in results.items()}
    totals = {column: round(sum(cells.values()), 1) for column, cells in costs.items()}
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps({"totals": totals, "cells": costs}, indent=1) + "\n")


def _close(actual, expected, what, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def _check_exact(cell, reference, where, rtol=RTOL, weights_atol=ATOL):
    assert sorted(cell["history"]) == sorted(reference["history"]), where
    for key, values in reference["history"].items():
        _close(cell["history"][key], values, f"{where}: history[{key!r}]", rtol)
    assert cell["epochs"] == reference["epochs"], where
    assert sorted(cell["evaluate"]) == sorted(reference["evaluate"]), where
    for key, value in reference["evaluate"].items():
        _close(cell["evaluate"][key], value, f"{where}: evaluate[{key!r}]", rtol)
    assert len(cell["weights"]) == len(reference["weights"]) > 0, where
    for i, (a, b) in enumerate(zip(cell["weights"], reference["weights"])):
        _close(a, b, f"{where}: weight {i}", rtol, weights_atol)


def _check_low_rank(cell, reference, where):
    """A PowerSGD cell against the default's: the same epochs and keys, every loss within
    ``LOW_RANK_LOSS_RTOL``, every other metric within ``LOW_RANK_METRIC_ATOL``."""
    assert cell["epochs"] == reference["epochs"], where
    for got, want, what in ((cell["history"], reference["history"], "history"),
                            (cell["evaluate"], reference["evaluate"], "evaluate")):
        assert sorted(got) == sorted(want), where
        for key, value in want.items():
            loss = "loss" in key
            _close(got[key], value, f"{where}: {what}[{key!r}]",
                   LOW_RANK_LOSS_RTOL if loss else 0, 0 if loss else LOW_RANK_METRIC_ATOL)


def _check_trains(cell, where):
    losses = cell["history"]["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], (where, losses)
    assert cell["evaluate"]["accuracy"] > 0.5, (where, cell["evaluate"])


def _check_cell(strategy, feature, cell, reference):
    where = f"{feature} under {strategy}"
    expected_error = EXPECTED_ERRORS.get((strategy, feature))
    if expected_error:
        assert cell["status"] == "error", f"{where}: expected our error, got a result"
        assert cell["module"].startswith("tfdistributed"), (where, cell["traceback"])
        assert expected_error in cell["message"], (where, cell["message"])
        return
    assert cell["status"] == "ok", f"{where} failed:\n{cell.get('traceback')}"
    # Whatever the strategy, evaluate reports the global accuracy, i.e. that of the predictions.
    assert cell["evaluate"]["accuracy"] == pytest.approx(cell["true_accuracy"], abs=1e-6), where
    if _exact(strategy, feature) and strategy == COMPRESSED:
        _check_exact(cell, reference, where, COMPRESSED_RTOL, COMPRESSED_ATOL)
    elif _exact(strategy, feature) and strategy == LOW_RANK:
        _check_low_rank(cell, reference, where)
    elif _exact(strategy, feature):
        _check_exact(cell, reference, where, FEATURE_RTOL.get(feature, RTOL))
    else:
        _check_trains(cell, where)
    if cell["csv_losses"] is not None:
        _close(cell["csv_losses"], cell["history"]["loss"], f"{where}: CSVLogger file")
        assert cell["callback_epochs"] == cell["epochs"], where
        assert {"log.csv", "model.keras", "tensorboard"} <= set(cell["files"]), (where, cell["files"])
        assert not [f for f in cell["files"] if f.startswith(".workertemp")], (where, cell["files"])


def _runs(strategy, feature) -> bool:
    """Whether the cell is run: a compressed column runs only the features whose gradients or
    all-reduce take another path than the baseline's (conformance.COMPRESSED_FEATURES), the
    one_device and central_storage columns those whose path differs from the default's and
    mirrored's (conformance.PARTIAL_COLUMNS)."""
    if strategy in (COMPRESSED, LOW_RANK):
        return feature in conformance.COMPRESSED_FEATURES
    if strategy in conformance.PARTIAL_COLUMNS:
        return feature in conformance.PARTIAL_COLUMNS[strategy][0]
    return True


@pytest.mark.parametrize("strategy,feature", [(s, f) for s in STRATEGIES for f in FEATURES
                                              if _runs(s, f)])
def test_cell(matrix, strategy, feature):
    _check_cell(strategy, feature, matrix[strategy][feature], matrix["default"][feature])


@pytest.mark.parametrize("cluster,feature", [
    (c, f) for c in ("multi_worker_mirrored", COMPRESSED, LOW_RANK) for f in FEATURES
    if _runs(c, f)])
def test_workers_agree_bit_for_bit(matrix, cluster, feature):
    chief, other = matrix[cluster][feature], matrix[f"{cluster}:worker 1"][feature]
    if (cluster, feature) in EXPECTED_ERRORS:  # refused alike on every worker
        assert chief["status"] == other["status"] == "error"
        assert chief["message"] == other["message"]
        return
    assert chief["status"] == other["status"] == "ok", (chief.get("traceback"), other.get("traceback"))
    assert chief["history"] == other["history"] and chief["evaluate"] == other["evaluate"]
    key = "trainable_weights" if feature in PER_REPLICA_STATE else "weights"
    assert len(chief[key]) == len(other[key]) > 0
    for a, b in zip(chief[key], other[key]):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def one_large_batch():
    return conformance.one_large_batch()


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != LOW_RANK])
def test_accumulated_steps_update_as_one_large_batch(matrix, one_large_batch, strategy):
    # 4 accumulated steps of 32 examples (split over the replicas and workers) give the weights
    # of one step of 128 on one device. The same sums in another order: the baseline's
    # tolerance (fp16's where the gradients are rounded to 11 bits).
    cell = matrix[strategy]["gradient_accumulation"]
    assert cell["status"] == "ok", cell.get("traceback")
    rtol, atol = (COMPRESSED_RTOL, COMPRESSED_ATOL) if strategy == COMPRESSED else (RTOL, ATOL)
    assert len(cell["weights"]) == len(one_large_batch) > 0
    for i, (a, b) in enumerate(zip(cell["weights"], one_large_batch)):
        _close(a, b, f"{strategy}: weight {i}", rtol, atol)


def _cell_text(strategy, feature, cell):
    if not _runs(strategy, feature):
        partial = conformance.PARTIAL_COLUMNS.get(strategy)
        return f"not run: as `{partial[1]}`" if partial else "same path as 32 bits"
    if (strategy, feature) in EXPECTED_ERRORS:
        return f"our error: {EXPECTED_ERRORS[(strategy, feature)]}"
    if cell["status"] != "ok":
        return f"FAILS: {cell['type']}"
    if strategy == "default":
        return "reference"
    if _exact(strategy, feature) and strategy == COMPRESSED:
        return "same as default within fp16's tolerance"
    if _exact(strategy, feature) and strategy == LOW_RANK:
        return "close to default within PowerSGD's tolerance"
    if _exact(strategy, feature):
        rtol = FEATURE_RTOL.get(feature)
        return "same as default" + (f" (rtol {rtol:g})" if rtol else "")
    return "trains; global metrics"


def _partial_legend() -> list[str]:
    lines = []
    for column, (runs, like, why) in conformance.PARTIAL_COLUMNS.items():
        text = (f"**not run: as `{like}`**, in the `{column}` column: {why}: "
                + ", ".join(f"`{f}`" for f in runs) + ".")
        lines += textwrap.wrap(text, 95, initial_indent="- ", subsequent_indent="  ",
                               break_on_hyphens=False)
    return lines


def render_table(matrix) -> str:
    lines = [
        "# Conformance: Keras features x strategies",
        "",
        "Generated by `tests/python/training/test_conformance.py` from its own results (`make test` fails",
        "when this file is out of date). Each cell trains a small seeded model on the digits data",
        "for a few epochs: through `tfdistributed.fit` (R: `fit_distributed()`), or through plain",
        "`model.fit` in the `plain_model_fit` rows and four option rows (below).",
        "`multi_worker_mirrored` is a real 2-worker cluster on",
        "127.0.0.1, `parameter_server` a real chief + 1 worker + 1 ps cluster,",
        f"`{COMPRESSED}` the same 2-worker cluster with `gradient_compression=\"fp16\"`,",
        f"`{LOW_RANK}` with `gradient_compression=powersgd(rank = "
        f"{conformance.POWERSGD['rank']},",
        f"warmup_steps = {conformance.POWERSGD['warmup_steps']})` (the three columns in one job).",
        "",
        f"- **same as default**: the same history, `evaluate` results and final weights as the",
        f"  default strategy (relative tolerance {RTOL:g}); both workers bit-for-bit equal.",
        f"- **same as default within fp16's tolerance**: the same, within a relative tolerance of",
        f"  {COMPRESSED_RTOL:g} (the weights also an absolute one of {COMPRESSED_ATOL:g}): the gradients",
        "  are rounded to 11 significant bits at every step. Both workers bit-for-bit equal.",
        "- **close to default within PowerSGD's tolerance**: the same epochs and history keys,",
        f"  every loss (history, validation, `evaluate`) within a relative {LOW_RANK_LOSS_RTOL:g} of",
        f"  the default's, every other metric within an absolute {LOW_RANK_METRIC_ATOL:g}. The weights",
        f"  are not compared: from step {conformance.POWERSGD['warmup_steps'] + 1} on the gradients "
        f"are rank-{conformance.POWERSGD['rank']} approximations (what",
        "  they drop is fed back in later steps), another path to a similar model. Both workers",
        "  bit-for-bit equal.",
        "- **trains; global metrics**: randomness (dropout, noise, augmentation, a shuffled order),",
        "  per-replica state (batch statistics), reduced precision (bfloat16), or a",
        "  parameter-server worker repeating its own input pipeline make the numbers differ from one",
        "  device; the loss falls, and `evaluate` reports the accuracy of the model's own",
        "  predictions over all the data.",
        "- **same path as 32 bits**: not run in the compressed columns. Compression changes only",
        "  the all-reduce of the gradients, and this feature reaches it as `baseline` does; the",
        "  compressed columns run the features whose gradients or all-reduce take another path:",
        *(f"  `{feature}` ({why})," if i < len(conformance.COMPRESSED_FEATURES) - 1 else
          f"  `{feature}` ({why})."
          for i, (feature, why) in enumerate(conformance.COMPRESSED_FEATURES.items())),
        *_partial_legend(),
        "- The last rows are Keras' own training options on the baseline's model:",
        f"  `gradient_accumulation` (`SGD(gradient_accumulation_steps="
        f"{conformance.ACCUMULATION_STEPS})`, batches of {conformance.ACCUMULATED_BATCH}; in every",
        f"  column except PowerSGD's its weights also equal those of one step of "
        f"{conformance.LARGE_BATCH} per update on one",
        "  device, same tolerance), `steps_per_execution_auto` (`compile(steps_per_execution =",
        "  \"auto\")`), `jit_compile`, `ema_clipnorm` (`Adam(use_ema = TRUE,",
        "  ema_overwrite_frequency = 5, clipnorm = 0.5)`), `loss_scale_clipvalue`",
        "  (`LossScaleOptimizer(SGD(clipvalue = 0.02))`) and `run_eagerly`;",
        "  `gradient_accumulation`, `steps_per_execution_auto`, `jit_compile` and `run_eagerly`",
        "  train through Keras' own `model.fit` (where keras3's R `fit()` arrives), the others",
        "  through `tfdistributed.fit`. `global_clipnorm` is in `schedule_and_clipping`.",
        "  **our error**: refused before training by a tfdistributed error that names the option",
        "  and the strategy and says what to use instead (the cell shows its opening words).",
        "- In every cell `evaluate`'s accuracy equals the accuracy of the model's predictions.",
        "- `batchnorm`: plain `BatchNormalization` keeps its moving statistics per replica (and per",
        "  worker), as TensorFlow documents; every trainable weight is still equal on all workers.",
        "  `BatchNormalization(synchronized=True)` (row `sync_batchnorm`) shares them.",
        "",
        "| feature | " + " | ".join(STRATEGIES) + " |",
        "|---|" + "---|" * len(STRATEGIES),
    ]
    for feature in FEATURES:
        cells = [_cell_text(s, feature, matrix[s].get(feature)) for s in STRATEGIES]
        lines.append(f"| `{feature}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def test_table_in_the_docs_is_current(matrix):
    # The sections after this table (the R side, placements, keras3) are their tests' own.
    assert conformance.write_section(None, render_table(matrix)), \
        "CONFORMANCE.md was out of date and has been regenerated: commit it"