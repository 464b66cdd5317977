"""keras3's R fit() on 2 workers leaves together (tfdistributed.cluster.leave): its worker 1
makes its last read from worker 0 four seconds after training ended, and the job ends well,
each worker's log saying it left through the end-of-training barrier. The Python paths
(tfdistributed's fit() and Keras' model.fit), and the same race without the barrier failing
the job, are tests/python/engines/test_leave_together.py."""

from __future__ import annotations

import re

import pytest

import tfdistributed as tfd
from rsupport import ROOT, keras3_env

SCRIPT = ROOT / "tests" / "r" / "scripts" / "leave_race_keras3.R"
SLOW = 4.0
pytestmark = pytest.mark.cluster


def test_keras3_fit_waits_for_the_slow_reader(r_package):
    lines = []
    result = tfd.launch(str(SCRIPT), workers=2, args=[str(SLOW)], timeout=300,
                        env={"R_LIBS": keras3_env()["R_LIBS"]},
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert any(re.match(r"\[worker 1\] worker 1 read trained", ln) for ln in lines), lines
    said = {}
    for ln in lines:
        m = re.match(r"\[worker (\d)\] tfdistributed: Keras' model.fit\(\) ended; every worker "
                     r"reached the end-of-training barrier \(waited ([\d.]+) s\)", ln)
        if m:
            said[int(m.group(1))] = float(m.group(2))
    # Worker 0 waited there until worker 1's late read was done.
    assert sorted(said) == [0, 1] and said[0] > SLOW / 2 > said[1], (said, lines[-20:])
