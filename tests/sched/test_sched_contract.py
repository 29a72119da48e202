"""Every scheduler passes the shared contract (schedulers.testing)."""

from __future__ import annotations

import math

import pytest

from schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PASHAScheduler,
    PopulationBasedTraining,
    TrialScheduler,
)
from schedulers.testing import (
    SchedulerContract,
    SimulationError,
    check_scheduler_contract,
    contract_curves,
    simulate,
)


class TestASHAContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3, seed=7)


class TestASHABracketsContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3, brackets=3, seed=7)


class TestMOASHAContract(SchedulerContract):
    metric = ["loss", "latency"]

    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3, seed=7)


class TestMOASHAEpsNetContract(SchedulerContract):
    metric = ["loss", "latency"]

    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3, mo_tiebreak="epsnet", brackets=2, seed=7)


class TestCostAwareASHAContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3, cost_attr="time_total_s")


class TestChosenRungsASHAContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return ASHAScheduler(max_t=27, rung_levels=[2, 5, 11], reduction_factor=3)


class TestPASHAContract(SchedulerContract):
    full_budget = False  # PASHA chooses the budget: the best trial gets as far as any other

    def make_scheduler(self) -> TrialScheduler:
        return PASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)


class TestPASHAFixedEpsilonContract(SchedulerContract):
    full_budget = False

    def make_scheduler(self) -> TrialScheduler:
        return PASHAScheduler(max_t=27, grace_period=1, reduction_factor=2, epsilon=0.01)


class TestMOHyperBandContract(SchedulerContract):
    metric = ["loss", "latency"]

    def make_scheduler(self) -> TrialScheduler:
        return HyperBandScheduler(max_t=27, reduction_factor=3)


class TestHyperBandContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return HyperBandScheduler(max_t=27, reduction_factor=3)


class TestMedianContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return MedianStoppingRule(grace_period=2, min_samples_required=2)


class TestMedianSoftContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return MedianStoppingRule(grace_period=2, min_samples_required=2, hard_stop=False)


class TestPBTContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=3, seed=3,
                                       hyperparam_mutations={"lr": [0.1, 0.01, 0.001]})


class TestPBTSynchContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=3, seed=3, synch=True,
                                       hyperparam_mutations={"lr": [0.1, 0.01, 0.001]})


class TestFIFOContract(SchedulerContract):
    def make_scheduler(self) -> TrialScheduler:
        return FIFOScheduler()


def test_contract_checks_are_not_vacuous():
    run = simulate(ASHAScheduler(max_t=27, reduction_factor=3), contract_curves(27),
                   max_concurrent=3, max_t=27)
    assert any(d[1] == "result" and d[4] == "STOP" and d[3] < 27 for d in run.decisions)
    run = simulate(HyperBandScheduler(max_t=27), contract_curves(27), max_concurrent=3, max_t=27)
    assert any(d[1] == "stop" for d in run.decisions)


def test_contract_catches_a_broken_scheduler():
    class Forgetful(TrialScheduler):
        """Pauses everything and never resumes: must be caught."""

        def on_trial_add(self, trial_id, config):
            super().on_trial_add(trial_id, config)

        def on_trial_result(self, trial_id, result):
            self._require_known(trial_id)
            from schedulers import Decision
            return Decision.PAUSE

    with pytest.raises(SimulationError, match="left trials paused forever"):
        check_scheduler_contract(Forgetful)

    class Random(TrialScheduler):
        """Decides with the global RNG's state advancing: not reproducible."""

        counter = 0

        def on_trial_result(self, trial_id, result):
            from schedulers import Decision
            Random.counter += 1
            return Decision.STOP if Random.counter % 7 == 0 else Decision.CONTINUE

    with pytest.raises(AssertionError):
        check_scheduler_contract(Random, check_unknown_trial=False)


def test_simulate_reports_and_is_deterministic():
    curves = {"a": [3.0, 2.0, 1.0], "b": lambda step: 10.0 / step}
    run = simulate(FIFOScheduler(), curves, max_concurrent=1, max_t=5)
    assert run.iterations == {"a": 3, "b": 5}
    assert run.total_iterations == 8
    assert run.best_value == 1.0 and run.best_trial == "a"
    assert run.decisions_for("a") == ["CONTINUE"] * 3
    run_max = simulate(FIFOScheduler(), curves, max_concurrent=2, max_t=5, mode="max")
    assert run_max.best_value == 10.0 and run_max.best_trial == "b"
    assert math.isclose(run_max.ticks, 5)
