"""Where a program makes its model and optimizer and calls compile, fit, evaluate, predict and
save, relative to ``with strategy.scope()`` (issue 51): every placement trains as the program
that does everything inside the scope, weight for weight, under every strategy kind, and as one
device does; the mistakes no repair can mend are the package's PlacementError; and each of the
three placement repairs is needed (without it, its placements fail as Keras 3 alone fails, or
report other numbers).

The programs are tests/python/support/placement.py; the R programs, tests/r/test_r_keras3.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import conformance
import placement
import tfdistributed as tfd

KINDS = ["one_device", "mirrored", "central_storage"]
# Not the default strategy: its scope is the one every program is in already, so no placement
# there is inside or outside anything; each runs as the `one_device` fixture's program (the
# reference every column is compared with).
IN_PROCESS = KINDS
CLUSTERS = ["multi_worker_mirrored", "parameter_server"]
SECTION = "## Where the program makes its model and calls compile"


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The program with everything inside, on one device (TensorFlow's default strategy)."""
    return placement.one_device(str(tmp_path_factory.mktemp("default")))


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    """``in_process(kind)``: every placement under ``kind`` in this process, run once."""
    runs = {}

    def results(kind):
        if kind not in runs:
            runs[kind] = placement.run_all(tfd.make_strategy(kind),
                                           str(tmp_path_factory.mktemp(kind)))
        return runs[kind]

    return results


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Every placement on a 2-worker job (worker 0's results, and worker 1's) and on the
    coordinator of a chief + worker + ps job."""
    root = tmp_path_factory.mktemp("clusters")
    job = tfd.launch(placement.run_launched, workers=2, args=(str(root / "mwms"),), timeout=600,
                     watch=tfd.Watch(echo=False))
    ps = tfd.launch(placement.run_launched, tfd.Scaling(workers=1, ps=1, chief=True),
                    args=(str(root / "ps"),), timeout=600, watch=tfd.Watch(echo=False))
    return {"multi_worker_mirrored": job.values[0], "worker 1": job.values[1],
            "parameter_server": next(v for v in ps.values if v)}  # servers return nothing


def _mismatch(result, reference, exact=True):
    """What differs between two runs of a placement (weights, history, evaluation,
    predictions), or None; ``exact=False``: up to float rounding (rtol 1e-5)."""
    if "error" in result:
        return f"{result['error']}: {result['message'][:200]}"
    same = (lambda a, b: np.array_equal(a, b)) if exact else \
        (lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-6))
    pairs = [*(("weight", a, b) for a, b in zip(result["weights"], reference["weights"])),
             *((f"history {k}", result["history"].get(k), v)
               for k, v in reference["history"].items()),
             *((f"evaluate {k}", result["evaluate"].get(k), v)
               for k, v in reference["evaluate"].items()),
             ("predict", result["predict"], reference["predict"])]
    if len(result["weights"]) != len(reference["weights"]):
        return "another number of weights"
    for what, a, b in pairs:
        if a is None or not same(np.asarray(a), np.asarray(b)):
            return what
    if not _same_up_to_float32_rounding(result["loaded_predict"], result["predict"]):
        return "the saved model predicts otherwise"
    return None


def _same_up_to_float32_rounding(loaded, predicted) -> bool:
    """The loaded model's predictions (Keras' default batch of 32, on one device) against the
    trained model's (batches of 32 split over its replicas): the same weights, summed in another
    order. A float32 dot product is rounded relative to the magnitude of what it sums (about
    n x 6e-8 of it for n terms, n = 32 here), not to its result, so a logit near zero may differ
    by more than any relative tolerance of its own value; the largest logit stands for that
    magnitude. Seen: 1.8e-7 on logits up to 1.1 (1.6e-7 of it) on an AMD EPYC; the allowance is
    1e-5 of it."""
    scale = float(np.abs(predicted).max())
    return np.allclose(loaded, predicted, rtol=1e-5, atol=1e-5 * scale)


def _same_training(result, reference, what, exact=True):
    assert _mismatch(result, reference, exact) is None, (what, _mismatch(result, reference, exact))


@pytest.mark.slow  # each kind ~1 min: every placement trained, saved and loaded
@pytest.mark.parametrize("kind", IN_PROCESS)
def test_every_placement_trains_as_everything_inside_and_as_one_device(kind, in_process,
                                                                        one_device):
    results = in_process(kind)
    replicas = 1 if kind == "one_device" else 2
    for name, result in results.items():
        assert result.get("replicas") == replicas, (name, result)
        _same_training(result, results["all_inside"], f"{kind}, {name}")
    _same_training(results["all_inside"], one_device, f"{kind} against one device",
                   exact=replicas == 1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mistake,says", [
    ("weights_outside_used_inside", "made in no strategy scope, yet it is used inside"),
    ("layers_in_two_scopes", "made in different scopes"),
    ("compile_in_another_scope", "compile() was called inside"),
    ("optimizer_made_in_another_scope", "The optimizer 'adam"),
])
def test_a_placement_no_repair_can_mend_is_refused_by_name(kind, mistake, says):
    strategy = tfd.make_strategy(kind)
    other = tfd.make_strategy("mirrored" if kind == "one_device" else "one_device")
    error = placement.mistake(strategy, other, mistake)
    assert isinstance(error, tfd.PlacementError), repr(error)
    message = str(error)
    assert says in message and f"'{tfd.strategy_kind(strategy)}' strategy's scope" in message, \
        message
    assert "Make " in message or "Compile the" in message, message  # the fix, named


@pytest.mark.cluster
def test_multi_worker_and_parameter_server_placements_train_as_one_device(clusters, one_device):
    for column in ("multi_worker_mirrored", "worker 1", "parameter_server"):
        results = clusters[column]
        for name, result in results.items():
            _same_training(result, clusters["multi_worker_mirrored"]["all_inside"]
                           if column == "worker 1" else results["all_inside"],
                           f"{column}, {name}")
        _same_training(results["all_inside"], one_device, f"{column} against one device",
                       exact=False)
    assert all(r["replicas"] == 2 for r in clusters["multi_worker_mirrored"].values())


def render_section(columns, one_device) -> str:
    """The placement table of CONFORMANCE.md, from the results of every column."""
    def cell(kind, name):
        results = columns[kind]
        if name == "all_inside":
            exact = kind == "one_device"
            wrong = _mismatch(results[name], one_device, exact)
            return wrong or ("same as one device" if exact else "same as one device (rtol 1e-5)")
        return _mismatch(results[name], results["all_inside"]) or "same as all inside"

    where = placement.PLACEMENTS
    lines = [
        SECTION, "",
        "Generated by `tests/python/training/test_placement.py`. Each program builds the same "
        "seeded model and",
        "trains it with `fit(validation_split = 0.25)`, early stopping and a checkpoint, then "
        "`evaluate`,",
        "`predict`, `save` and `load_model`; only what it does inside `with strategy.scope()` "
        "differs",
        "(in: inside the scope; name: the optimizer named in `compile`). *Same* means the same "
        "weights,",
        "history, evaluation and predictions, bit for bit unless a tolerance is given. The keras3 "
        "R programs",
        "of the same placements are in the next section. The one-device reference is the "
        "program with everything",
        "inside under TensorFlow's default strategy, whose scope every program is in already "
        "(no column of its own).", "",
        "| placement | model object | layers | optimizer | compile | fit, evaluate, save | "
        + " | ".join(IN_PROCESS + CLUSTERS) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(IN_PROCESS + CLUSTERS)]
    for name, w in where.items():
        lines.append(f"| `{name}` | {w['model']} | {w['layers']} | {w['optimizer']} | "
                     f"{w['compile']} | {w['calls']} | "
                     + " | ".join(cell(k, name) for k in IN_PROCESS + CLUSTERS) + " |")
    lines += ["", "What no repair can mend is `tfdistributed.PlacementError` (tested under "
              "`one_device`, `mirrored` and",
              "`central_storage`), naming what was made in which scope and what to move:", ""]
    lines += [f"- `{m}`" for m in placement.MISTAKES]
    return "\n".join(lines) + "\n"


@pytest.mark.cluster
def test_placement_section_of_the_conformance_table_is_current(in_process, clusters,
                                                                one_device):
    columns = {kind: in_process(kind) for kind in IN_PROCESS} | clusters
    assert conformance.write_section(SECTION, render_section(columns, one_device)), \
        "CONFORMANCE.md was out of date and has been regenerated: commit it"


@pytest.mark.cluster
@pytest.mark.parametrize("switched_off,fails", [
    ("optimizer_follows_its_model", {
        "optimizer_made_outside": "'Adam' object has no attribute '_momentums'",
        "object_outside_compile_outside": "'Adam' object has no attribute '_momentums'"}),
    ("model_strategy_from_weights", {
        "object_outside_compile_inside": "SyncOnReadVariable does not support `assign_add`",
        "object_outside_compile_outside": "tuple indices must be integers or slices, "
                                          "not MirroredVariable"}),
])
def test_each_placement_repair_is_needed_under_mirrored(switched_off, fails):
    # Its own process: a repair is switched off from the start of one.
    job = tfd.launch(placement.run_without_repairs, workers=1, args=(list(fails),), timeout=300,
                     env={"TFDISTRIBUTED_DISABLE_COMPAT": switched_off},
                     watch=tfd.Watch(echo=False))
    for name, says in fails.items():
        assert says in job.values[0][name].get("message", ""), (name, job.values[0][name])


@pytest.mark.cluster
def test_compile_outside_the_scope_reports_each_workers_own_loss_without_its_repair(tmp_path):
    # The weights train alike, but the loss tracker Keras makes in compile() belongs to no
    # strategy: each worker reports the loss of its own half of the batch, silently.
    job = tfd.launch(placement.run_launched, workers=2,
                     args=(str(tmp_path), ("all_inside", "compile_outside")), timeout=600,
                     env={"TFDISTRIBUTED_DISABLE_COMPAT": "compile_under_model_strategy"},
                     watch=tfd.Watch(echo=False))
    inside = job.values[0]["all_inside"]
    for worker, results in enumerate(job.values):
        outside = results["compile_outside"]
        for a, b in zip(outside["weights"], inside["weights"], strict=True):
            np.testing.assert_array_equal(a, b)
        assert not np.allclose(outside["history"]["val_loss"], inside["history"]["val_loss"],
                               rtol=1e-4), (worker, outside["history"], inside["history"])
    assert job.values[0]["compile_outside"]["history"]["loss"] != \
        job.values[1]["compile_outside"]["history"]["loss"]
