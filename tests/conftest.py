"""Fixtures shared by the test files."""
import contextlib

import pytest


@pytest.fixture
def heartbeats(monkeypatch):
    "The (description, enabled) of every `heartbeat` line asked for while the test runs (none is shown)."
    seen = []
    @contextlib.contextmanager
    def recording(desc, enabled=True, **kw):
        seen.append((desc, enabled)); yield
    monkeypatch.setattr("dpmf_lit.model.mechanism.heartbeat", recording)
    return seen
