"""Where a program makes its model and optimizer and calls compile, fit, evaluate, predict and
save, relative to ``with strategy.scope()`` (issue 51): every placement trains as the program
that does everything inside the scope, weight for weight, under every strategy kind, and as one
device does; the mistakes no repair can mend are the package's PlacementError; and each of the
three placement repairs is needed (without it, its placements fail as Keras 3 alone fails, or
report other numbers).

The programs are tests/python/support/placement.py; the R programs are tests/r/test_r_keras3.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import tfdistributed as tfd
import placement

KINDS = ["one_device", "mirrored", "central_storage"]


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The program with everything inside, on one device (TensorFlow's default strategy)."""
    return placement.run(tfd.make_strategy("default"), "all_inside",
                         str(tmp_path_factory.mktemp("default")))


def _same_training(result, reference, what, exact=True):
    """``result`` trained as ``reference``: the same weights, history, evaluation and
    predictions (exactly, or up to float rounding where the sums run in another order)."""
    assert "error" not in result, f"{what}: {result}"
    check = np.testing.assert_array_equal if exact else \
        (lambda a, b, err_msg: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                                          err_msg=err_msg))
    for i, (a, b) in enumerate(zip(result["weights"], reference["weights"], strict=True)):
        check(a, b, err_msg=f"{what}: weight {i}")
    assert result["history"].keys() == reference["history"].keys(), what
    for key, values in reference["history"].items():
        check(result["history"][key], values, err_msg=f"{what}: history {key}")
    for key, value in reference["evaluate"].items():
        check(result["evaluate"][key], value, err_msg=f"{what}: evaluate {key}")
    check(result["predict"], reference["predict"], err_msg=f"{what}: predict")
    np.testing.assert_allclose(result["loaded_predict"], result["predict"], rtol=1e-6,
                               err_msg=f"{what}: the saved model predicts otherwise")


@pytest.mark.parametrize("kind", ["default", *KINDS])
def test_every_placement_trains_as_everything_inside_and_as_one_device(kind, tmp_path,
                                                                        one_device):
    strategy = tfd.make_strategy(kind)
    results = placement.run_all(strategy, str(tmp_path))
    replicas = 1 if kind in ("default", "one_device") else 2
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
def test_multi_worker_and_parameter_server_placements_train_as_one_device(tmp_path, one_device):
    job = tfd.launch(placement.run_launched, workers=2, args=(str(tmp_path / "mwms"),),
                     timeout=600, echo=False)
    for worker, results in enumerate(job.values):
        for name, result in results.items():
            assert result.get("replicas") == 2, (worker, name, result)
            _same_training(result, job.values[0]["all_inside"], f"worker {worker}, {name}")
    _same_training(job.values[0]["all_inside"], one_device, "multi-worker against one device",
                   exact=False)
    job = tfd.launch(placement.run_launched, workers=1, ps=1, chief=True,
                     args=(str(tmp_path / "ps"),), timeout=600, echo=False)
    results = next(v for v in job.values if v)  # the coordinator's (servers return nothing)
    for name, result in results.items():
        _same_training(result, results["all_inside"], f"parameter server, {name}")
    _same_training(results["all_inside"], one_device, "parameter server against one device",
                   exact=False)


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
                     echo=False, env={"TFDISTRIBUTED_DISABLE_COMPAT": switched_off})
    for name, says in fails.items():
        assert says in job.values[0][name].get("message", ""), (name, job.values[0][name])


@pytest.mark.cluster
def test_compile_outside_the_scope_reports_each_workers_own_loss_without_its_repair(tmp_path):
    # The weights train alike, but the loss tracker Keras makes in compile() belongs to no
    # strategy: each worker reports the loss of its own half of the batch, silently.
    job = tfd.launch(placement.run_launched, workers=2, args=(str(tmp_path),), timeout=600,
                     echo=False, env={"TFDISTRIBUTED_DISABLE_COMPAT": "compile_under_model_strategy"})
    inside = job.values[0]["all_inside"]
    for worker, results in enumerate(job.values):
        outside = results["compile_outside"]
        for a, b in zip(outside["weights"], inside["weights"], strict=True):
            np.testing.assert_array_equal(a, b)
        assert not np.allclose(outside["history"]["val_loss"], inside["history"]["val_loss"],
                               rtol=1e-4), (worker, outside["history"], inside["history"])
    assert job.values[0]["compile_outside"]["history"]["loss"] != \
        job.values[1]["compile_outside"]["history"]["loss"]
