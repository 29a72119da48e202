"""The executor contract (``tuneplat.testing.ExecutorContract``) on both executors: the same experiments leave the
same journal, decisions and ResultGrid on the virtual-time executor and on a real Dask LocalCluster."""

from __future__ import annotations

import pytest

from tuneplat.execution._dask_executor import DaskTrialExecutor
from tuneplat.testing import ExecutorContract, VirtualTimeExecutor


class TestVirtualTimeExecutor(ExecutorContract):
    def make_executor(self):
        return VirtualTimeExecutor(num_slots=self.slots)


class TestDaskExecutor(ExecutorContract):
    """On the session's 2-worker LocalCluster (real worker processes, the rank channel, chaining)."""

    @pytest.fixture(autouse=True)
    def _cluster(self, dask_client):
        self.client = dask_client

    def make_executor(self):
        return DaskTrialExecutor(self.client)
