"""The end of a multi-worker job: no worker leaves while a peer still reads from it
(tfdistributed.cluster.leave, at the end of tfdistributed's fit() and of Keras' own model.fit;
keras3's R fit() is tests/r/test_r_leave_together.py).

The race shown: worker 1 makes its last read from worker 0 (the job's leader, which serves the
coordination service) a few seconds after worker 0 has finished training. Without the barrier
worker 0 exits at once and worker 1's read fails; with it worker 0 waits for worker 1, at the
end of each path."""

import os
import re

import pytest

import tfdistributed as tfd

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "leave_race.py")
SLOW = 4.0
pytestmark = pytest.mark.cluster


def race(*paths, **env):
    lines = []
    result = tfd.launch(SCRIPT, workers=2, args=[str(SLOW), *paths], timeout=240, env=env,
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    return result, lines


def test_without_the_barrier_a_slow_last_read_fails_the_job():
    # Keras' own model.fit, the path keras3's R fit() takes.
    with pytest.raises(tfd.LaunchError) as failed:
        race("keras", TFDISTRIBUTED_LEAVE_TIMEOUT="0")
    # Worker 0 had finished (status 0); worker 1 lost it in the middle of its last read.
    assert failed.value.failure["task"] == "worker 1", str(failed.value)
    worker_0 = [t for t in failed.value.results if t.name == "worker 0"][0]
    assert worker_0.returncode == 0
    assert re.search(r"Lost contact with another worker|Unavailable|coordination service",
                     str(failed.value)), str(failed.value)


def _waits(lines, worker, what):
    pattern = (rf"\[worker {worker}\] tfdistributed: {re.escape(what)} ended; every worker "
               r"reached the end-of-training barrier \(waited ([\d.]+) s\)")
    return [float(m.group(1)) for m in map(re.compile(pattern).match, lines) if m]


def test_each_fit_waits_for_the_slow_reader_and_the_barrier_is_cheap():
    result, lines = race("tfd", "keras")
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert "[worker 1] worker 1 read leave_race_tfd trained" in lines
    assert "[worker 1] worker 1 read leave_race_keras trained" in lines
    # Both paths held worker 0 at their end until worker 1 had made its late read, and both
    # workers said they left together.
    for what in ("fit()", "Keras' model.fit()"):
        (waited_0,), (waited_1,) = _waits(lines, 0, what), _waits(lines, 1, what)
        assert waited_0 > SLOW / 2 and waited_1 < SLOW / 2, (what, waited_0, waited_1)
    # What a barrier costs when every worker is at it: one round trip to the leader.
    costs = [float(ln.split()[-1]) for ln in lines if re.match(r"\[worker \d\] barrier ", ln)]
    assert len(costs) == 2 and max(costs) < 1.0, costs
    print("barrier seconds:", costs)
