"""The cause of a failed attempt, named from each task's end time and kind of end, whatever the
order in which the ends reached the launcher (tfdistributed.engines.attribution)."""

import itertools

import pytest

from tfdistributed.engines.attribution import (
    CONSEQUENCE_WINDOW, FAILED, KILLED, LOST, PEER_LOST, PREEMPTED, End, first_cause,
    kind_of_end)

# What the survivor of a killed peer prints (training/trainer.py's message, under fit()).
SURVIVOR = ["Epoch 1/2", "tfdistributed.errors.TrainingError: Lost contact with another worker "
            "of the job during training (Socket closed): that worker failed or was stopped"]


def test_a_killed_worker_is_named_in_either_arrival_order():
    # Worker 1 SIGKILLed at t=10.0; worker 0's collective failed 0.3 s later. The launcher may
    # hear of either first, and on a loaded machine the consequence may even be stamped first.
    killed = End("worker 1", 10.0, kind_of_end(-9, []), order=1)
    for survivor_at in (10.3, 9.9, 10.0):
        survivor = End("worker 0", survivor_at, kind_of_end(1, SURVIVOR), order=0)
        assert survivor.kind == PEER_LOST
        for ends in ([killed, survivor], [survivor, killed]):
            assert first_cause(ends) == killed, (survivor_at, ends)


def test_tied_end_times_name_the_kill_then_the_task_order():
    # A warm server reaping both in one pass stamps them alike.
    killed = End("worker 1", 5.0, KILLED, order=1)
    consequence = End("worker 0", 5.0, PEER_LOST, order=0)
    error = End("worker 2", 5.0, FAILED, order=2)
    for ends in itertools.permutations([killed, consequence, error]):
        assert first_cause(ends) == killed
    assert first_cause([End("worker 1", 5.0, FAILED, 1), End("worker 0", 5.0, FAILED, 0)]).task \
        == "worker 0"
    assert first_cause([End("worker 0", 5.0, PEER_LOST, 0), End("worker 1", 5.0, FAILED, 1)]).task \
        == "worker 1"


def test_a_genuine_failure_followed_by_its_consequences_is_the_cause():
    error = End("worker 0", 3.0, kind_of_end(1, ["ValueError: bad shape"]), order=0)
    assert error.kind == FAILED
    after = [End("worker 1", 3.4, PEER_LOST, 1), End("chief 0", 3.5, PEER_LOST, 2)]
    for ends in itertools.permutations([error, *after]):
        assert first_cause(ends) == error


def test_the_earlier_of_two_causes_is_named_whatever_their_kinds():
    # An error first, then a kill (the launcher stopping the job would come later still).
    error, kill = End("worker 0", 1.0, FAILED, 0), End("worker 1", 1.5, KILLED, 1)
    assert first_cause([kill, error]) == error


def test_a_consequence_long_before_any_other_end_is_the_first_thing_seen():
    # A link cut: the survivor says so, and the other task's end comes much later.
    consequence = End("worker 0", 1.0, PEER_LOST, 0)
    later = End("worker 1", 1.0 + CONSEQUENCE_WINDOW + 5, KILLED, 1)
    assert first_cause([later, consequence]) == consequence
    assert first_cause([consequence]) == consequence
    both = [End("worker 1", 2.0, PEER_LOST, 1), End("worker 0", 1.0, PEER_LOST, 0)]
    assert first_cause(both).task == "worker 0"


def test_an_end_of_unknown_time_comes_after_the_timed_ones_but_explains_a_consequence():
    lost = End("worker 1", None, LOST, 1)
    assert first_cause([lost, End("worker 0", 4.0, FAILED, 0)]).task == "worker 0"
    assert first_cause([End("worker 0", 4.0, PEER_LOST, 0), lost]) == lost


@pytest.mark.parametrize("returncode, lines, lost, kind", [
    (-9, SURVIVOR, False, KILLED),       # a SIGKILL is a kill, whatever was printed before
    (-15, [], False, KILLED),
    (1, SURVIVOR, False, PEER_LOST),
    (-6, ["E0000 ... The following tasks are unhealthy (stopped sending heartbeats):"], False,
     PEER_LOST),                         # TensorFlow aborting the process over a lost peer
    (1, ["tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"], False,
     PEER_LOST),
    (1, ["Error in py_call_impl(callable, call_args$unnamed, call_args$named) :",
         "  tfdistributed.errors.TrainingError: Lost contact with another worker of the job"],
     False, PEER_LOST),                  # an R task's end says it too
    (1, ["ValueError: bad shape"], False, FAILED),
    (-11, [], False, KILLED),
    (75, ["Preempted: backed up at step 10"], False, PREEMPTED),
    (0, [], False, LOST),                # a server that exited: the cluster lost a task
    (None, [], False, LOST),
    (-9, [], True, LOST),
])
def test_kinds_of_end(returncode, lines, lost, kind):
    assert kind_of_end(returncode, lines, lost=lost) == kind


def test_no_end_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one task"):
        first_cause([])


def test_a_slurm_tasks_end_time_is_the_one_it_wrote_else_its_exit_codes_file(tmp_path):
    # slurm/task.py writes task-N.end (its process' exit, seconds since the epoch) beside
    # task-N.rc; an older task wrapper wrote the .rc only, whose time then stands in.
    import os

    from tfdistributed.engines.slurm.launcher import _ended_at

    (tmp_path / "task-0.end").write_text("1700000000.25")
    (tmp_path / "task-0.rc").write_text("-9")
    (tmp_path / "task-1.rc").write_text("1")
    os.utime(tmp_path / "task-1.rc", (1700000001.5, 1700000001.5))
    assert _ended_at(str(tmp_path), 0) == 1700000000.25
    assert _ended_at(str(tmp_path), 1) == 1700000001.5
    assert _ended_at(str(tmp_path), 2) is None
