"""The engines' tests start their tasks as a user's job does by default: cold, each task a
fresh interpreter, even when the shell running pytest sets TFDISTRIBUTED_WARM_START=1.
``test_warm.py`` asks for warm starts explicitly."""

import pytest


@pytest.fixture(scope="module", autouse=True)
def cold_starts():
    # Module scope, so that the modules' shared jobs (module fixtures) start cold too.
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TFDISTRIBUTED_WARM_START", raising=False)
        yield
