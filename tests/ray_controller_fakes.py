"""What Ray's allocation functions read of Ray's tuner, for calling them beside tuneplat's (the oracle in the
ResourceChangingScheduler tests): a trial, the controller's live trials and cluster size, the scheduler's base
resources. Algorithm inputs only: the tests compare what Ray's own functions return with what tuneplat's do."""

from __future__ import annotations


class FakeTrial:
    def __init__(self, trial_id, pgf, last_result):
        self.trial_id, self.placement_group_factory, self.last_result = trial_id, pgf, last_result


class Updater:
    def __init__(self, cpus, gpus):
        self.cpus, self.gpus = cpus, gpus

    def get_num_cpus(self):
        return self.cpus

    def get_num_gpus(self):
        return self.gpus


class Controller:
    def __init__(self, trials, cpus, gpus):
        self._trials, self._resource_updater = trials, Updater(cpus, gpus)

    def get_live_trials(self):
        return self._trials


class Sched:
    def __init__(self, base):
        self.base_trial_resources = base


def allocation_functions(kwargs, top):
    """tuneplat's and Ray's ``DistributeResources`` (``top``: ``DistributeResourcesToTopJob``, by the loss) built
    from the same arguments; the test skips where Ray, the reference, is not installed (CI installs it)."""
    import pytest
    from tuneplat.tune.schedulers.resource_changing_scheduler import DistributeResources, DistributeResourcesToTopJob

    ray_rcs = pytest.importorskip("ray.tune.schedulers.resource_changing_scheduler",
                                  reason="Ray is the reference; install the bench extra (CI does)")
    if top:
        kwargs = {**kwargs, "metric": "loss", "mode": "min"}
    ours = (DistributeResourcesToTopJob if top else DistributeResources)(**kwargs)
    rays = (ray_rcs.DistributeResourcesToTopJob if top else ray_rcs.DistributeResources)(**kwargs)
    return ours, rays
