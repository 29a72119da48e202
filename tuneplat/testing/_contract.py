"""The executor contract: what every :class:`~tuneplat.execution.TrialExecutor` must do alike.

The same experiments — FIFO, ASHA, PBT, failures and retries, checkpoints, a
class trainable with ``with_parameters``, stop criteria — run through a whole
:class:`tuneplat.Tuner` on the executor under test, and what they leave is
compared with one expected record: every trial's journal (the kinds of its
events in order), its decisions, results, checkpoints and errors, and the
:class:`~tuneplat.ResultGrid`. Wall-clock fields (times, pids, hosts, paths) are
left out; everything else must be identical, so the Dask executor and the
virtual-time one make the same decisions from the same seeds.

Subclass :class:`ExecutorContract` in a pytest module and give it
:meth:`~ExecutorContract.make_executor` (the trainables here are importable by
reference, so Dask workers find them)::

    from tuneplat.testing import ExecutorContract, VirtualTimeExecutor

    class TestVirtualTime(ExecutorContract):
        def make_executor(self):
            return VirtualTimeExecutor(num_slots=2)

Each test takes pytest's ``tmp_path``; nothing else is needed from pytest.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

from schedulers import Decision

from .._config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from .._tuner import Tuner
from ..core._journal import read_journal
from ..execution._executor import ExecutorContext, TrialExecutor
from ..search._domains import grid_search
from ..storage._checkpoint import Checkpoint
from ..train._session import get_checkpoint, get_context, report
from ..trainables._trainable import Trainable
from ..trainables._wrappers import with_parameters

__all__ = ["Counter", "ExecutorContract", "counting", "experiment_record"]

#: result keys that depend on the clock or the machine, left out of the comparison
_VOLATILE = frozenset({"time_this_iter_s", "time_total_s", "timestamp", "time_since_restore", "pid", "hostname",
                       "node_ip", "date", "trial_id", "experiment_id", "checkpoint_dir_name", "config"})
#: journal event fields that depend on the clock, the machine or the folder
_VOLATILE_EVENT = frozenset({"time", "path", "workers", "checkpoint", "traceback", "metrics", "result", "config_pickle",
                             "name", "info"})


def counting(config: dict[str, Any]) -> None:
    """A function trainable: ``loss = floor + 1/step`` for ``steps`` steps, a checkpoint at each.

    It goes on from its checkpoint (``get_checkpoint()``), and raises
    ``ValueError`` at step ``fail_at`` on its first ``fail_attempts`` attempts
    (``get_context().get_attempt()``).
    """
    start = 0
    checkpoint = get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "step"), encoding="utf-8") as f:
            start = int(f.read())
    for step in range(start + 1, int(config.get("steps", 4)) + 1):
        if step == config.get("fail_at") and get_context().get_attempt() < int(config.get("fail_attempts", 1)):
            raise ValueError(f"fails at step {step}")
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step"), "w", encoding="utf-8") as f:
                f.write(str(step))
            report({"loss": config["floor"] + 1.0 / step, "step": step},
                   checkpoint=Checkpoint.from_directory(folder))


class Counter(Trainable):
    """A class trainable: ``loss = floor + offset + 1/x``; done after ``steps`` steps; checkpoints ``x``."""

    def setup(self, config: dict[str, Any], offset: float = 0.0) -> None:
        self.x = 0
        self.offset = offset

    def step(self) -> dict[str, Any]:
        self.x += 1
        return {"loss": self.config["floor"] + self.offset + 1.0 / self.x, "done": self.x >= self.config["steps"]}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"x": self.x}

    def load_checkpoint(self, checkpoint: dict[str, Any] | str) -> None:
        assert isinstance(checkpoint, dict)
        self.x = checkpoint["x"]


def _plain_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in sorted(metrics.items())
            if k not in _VOLATILE and not k.startswith("config/")}


def experiment_record(grid: Any, *, global_order: bool = False) -> dict[str, Any]:
    """What an experiment left, without clocks, hosts or paths: the thing two executors must agree on.

    Args:
        grid: the :class:`~tuneplat.ResultGrid` of ``Tuner.fit()``.
        global_order: also record the order of every event across trials (only
            meaningful when one trial runs at a time).

    Returns:
        ``{"trials": [...], "order": [...]}``: trials by the order they were
        added, each with its config, status, error, journal kinds, decisions,
        results, kept checkpoints and last metrics.
    """
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    index: dict[str, int] = {}
    for e in events:
        if e["event"] == "trial_add":
            index[e["trial_id"]] = len(index)
    per_trial: dict[int, dict[str, Any]] = {i: {"kinds": [], "decisions": [], "results": [], "events": []}
                                            for i in index.values()}
    order = []
    for e in events:
        tid = e.get("trial_id")
        if tid not in index:
            order.append(e["event"])
            continue
        i = index[tid]
        rec = per_trial[i]
        rec["kinds"].append(e["event"])
        order.append((i, e["event"]))
        if e["event"] == "decision":
            rec["decisions"].append((e["iteration"], e["decision"], e.get("reason")))
        elif e["event"] == "result":
            rec["results"].append((e["result"]["training_iteration"], round(e["result"].get("loss", float("nan")), 9)))
        elif e["event"] not in ("trial_add",):
            rec["events"].append({k: (index.get(v, v) if k in ("from_trial", "source", "cloned_from") else v)
                                  for k, v in sorted(e.items()) if k not in _VOLATILE_EVENT and k != "trial_id"})
    by_id = {r.trial_id: r for r in grid}
    trials = []
    for tid, i in sorted(index.items(), key=lambda kv: kv[1]):
        r = by_id[tid]
        rec = per_trial[i]
        trials.append({
            "config": dict(r.config),
            "status": r.status,
            "error": str(r.error).splitlines()[0] if r.error is not None else None,
            "last": _plain_metrics(r.metrics or {}),
            "checkpoints": [os.path.basename(c.path.rstrip("/")) for c, _ in r.best_checkpoints],
            "checkpoint": os.path.basename(r.checkpoint.path.rstrip("/")) if r.checkpoint is not None else None,
            **rec,
        })
    out: dict[str, Any] = {"trials": trials}
    if global_order:
        out["order"] = order
    return out


class ExecutorContract:
    """Tests every executor passes alike; subclass it in a test module and define :meth:`make_executor`.

    Each test runs a whole Tuner on ``make_executor()`` and compares
    :func:`experiment_record` with the expected record (the same for every
    executor).
    """

    #: how many trials the executor under test runs at once (the expectations hold for 2)
    slots = 2

    def make_executor(self) -> TrialExecutor:
        """A fresh executor with room for :attr:`slots` one-rank trials."""
        raise NotImplementedError

    def _fit(self, tmp_path: Any, trainable: Any, space: dict[str, Any], *, tune_config: TuneConfig | None = None,
             **run: Any) -> Any:
        tc = tune_config or TuneConfig(metric="loss", mode="min")
        rc = RunConfig(name="contract", storage_path=str(tmp_path), verbose=0, mlflow=False, **run)
        return Tuner(trainable, param_space=space, tune_config=tc, run_config=rc,
                     executor=self.make_executor()).fit()

    # ------------------------------------------------------------------ the contract
    def test_fifo_reports_checkpoints_and_retention(self, tmp_path: Any) -> None:
        grid = self._fit(tmp_path, counting, {"floor": grid_search([0.0, 0.5, 1.0]), "steps": 4},
                         checkpoint_config=CheckpointConfig(num_to_keep=2))
        rec = experiment_record(grid)
        each = ["trial_start"] + ["checkpoint", "result"] * 2 + ["checkpoint", "checkpoint_deleted", "result"] * 2
        for t, floor in zip(rec["trials"], (0.0, 0.5, 1.0)):
            assert t["status"] == "TERMINATED" and t["error"] is None
            assert t["kinds"] == ["trial_add", *each, "trial_end"], t["kinds"]
            assert t["results"] == [(s, round(floor + 1.0 / s, 9)) for s in range(1, 5)]
            assert t["checkpoints"] == ["checkpoint_000003", "checkpoint_000004"]
            assert t["last"]["training_iteration"] == 4 and t["last"]["iterations_since_restore"] == 4
            assert t["decisions"] == []
        assert grid.get_best_result().config["floor"] == 0.0
        assert grid.num_errors == 0 and grid.num_terminated == 3

    def test_asha_makes_the_same_decisions(self, tmp_path: Any) -> None:
        from schedulers import ASHAScheduler

        asha = ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3)
        floors = [0.5, 0.2, 0.8, 0.0, 0.9, 0.1]
        grid = self._fit(tmp_path, counting, {"floor": grid_search(floors), "steps": 9},
                         tune_config=TuneConfig(metric="loss", mode="min", scheduler=asha, max_concurrent_trials=1))
        rec = experiment_record(grid, global_order=True)
        assert [t["results"][-1][0] for t in rec["trials"]] == ASHA_ITERATIONS
        assert [[d[:2] for d in t["decisions"]] for t in rec["trials"]] == ASHA_DECISIONS
        assert all(t["status"] == "TERMINATED" for t in rec["trials"])
        assert grid.get_best_result().config["floor"] == 0.0
        order = [o for o in rec["order"] if isinstance(o, tuple)]
        assert [i for i, kind in order if kind == "trial_start"] == list(range(len(floors)))

    def test_pbt_exploits_and_clones_alike(self, tmp_path: Any) -> None:
        from schedulers import PopulationBasedTraining

        pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, synch=True,
                                      hyperparam_mutations={"floor": [0.0, 0.25, 0.5, 2.0]}, seed=7,
                                      quantile_fraction=0.5)
        grid = self._fit(tmp_path, counting, {"floor": grid_search([0.0, 2.0]), "steps": 6},
                         tune_config=TuneConfig(metric="loss", mode="min", scheduler=pbt))
        rec = experiment_record(grid)
        exploits = [[(e["iteration"], e["from_trial"], e["from_iteration"], e["new_config"]["floor"])
                     for e in t["events"] if e["event"] == "exploit"] for t in rec["trials"]]
        assert exploits == PBT_EXPLOITS, exploits
        assert [t["config"] for t in rec["trials"]] == PBT_CONFIGS
        assert [t["results"][-1][0] for t in rec["trials"]] == [6, 6]
        assert all(t["status"] == "TERMINATED" for t in rec["trials"])

    def test_a_failure_is_retried_from_the_checkpoint_and_then_errors(self, tmp_path: Any) -> None:
        space = {"floor": 0.0, "steps": 4, "fail_at": grid_search([3, 2]), "fail_attempts": grid_search([1, 9])}
        grid = self._fit(tmp_path, counting, space, failure_config=FailureConfig(max_failures=1))
        rec = experiment_record(grid)
        by = {(t["config"]["fail_at"], t["config"]["fail_attempts"]): t for t in rec["trials"]}
        once = by[(3, 1)]  # fails once at step 3, goes on from checkpoint 2
        assert once["status"] == "TERMINATED" and once["error"] is None
        assert [r[0] for r in once["results"]] == [1, 2, 3, 4]
        starts = [e for e in once["events"] if e["event"] == "trial_start"]
        assert [(s["attempt"], s["start_iteration"]) for s in starts] == [(0, 0), (1, 2)]
        assert once["kinds"] == ["trial_add", "trial_start", "checkpoint", "result", "checkpoint", "result",
                                 "rank_failure", "trial_failure", "trial_start", "checkpoint", "result",
                                 "checkpoint", "result", "trial_end"]
        for step, t in ((3, by[(3, 9)]), (2, by[(2, 9)])):  # fails on every attempt: ERROR after max_failures retries
            message = f"rank 0: ValueError: fails at step {step}"
            assert t["status"] == "ERROR" and t["error"] == message
            failures = [e for e in t["events"] if e["event"] == "trial_failure"]
            assert [(f["attempt"], f["retry"], f["message"]) for f in failures] == [(0, True, message),
                                                                                    (1, False, message)]
            assert [r[0] for r in t["results"]] == list(range(1, step))
            assert t["checkpoint"] == f"checkpoint_{step - 1:06d}"
            assert t["kinds"] == ["trial_add", "trial_start"] + ["checkpoint", "result"] * (step - 1) + [
                "rank_failure", "trial_failure", "trial_start", "rank_failure", "trial_failure", "trial_end"]
        twice = by[(2, 1)]
        assert twice["status"] == "TERMINATED" and [r[0] for r in twice["results"]] == [1, 2, 3, 4]
        assert grid.num_errors == 2 and all("fails at step" in str(e) for e in grid.errors)

    def test_class_trainable_with_parameters_and_checkpoint_policy(self, tmp_path: Any) -> None:
        trainable = with_parameters(Counter, offset=1.0)
        grid = self._fit(tmp_path, trainable, {"floor": grid_search([0.0, 0.5]), "steps": 5},
                         checkpoint_config=CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True))
        rec = experiment_record(grid)
        for t, floor in zip(rec["trials"], (0.0, 0.5)):
            assert t["status"] == "TERMINATED"
            assert t["results"] == [(s, round(floor + 1.0 + 1.0 / s, 9)) for s in range(1, 6)]
            assert [e["iteration"] for e in t["events"] if e["event"] == "checkpoint"] == [2, 4, 5]
            assert t["last"]["done"] is True and t["checkpoint"] == "checkpoint_000005"

    def test_stop_criteria_end_trials_alike(self, tmp_path: Any) -> None:
        grid = self._fit(tmp_path, counting, {"floor": grid_search([0.0, 0.3]), "steps": 9},
                         stop={"training_iteration": 5})
        rec = experiment_record(grid)
        for t in rec["trials"]:
            assert [r[0] for r in t["results"]] == [1, 2, 3, 4, 5]
            assert t["decisions"] == [(5, "STOP", "stop criteria met")]
            assert t["status"] == "TERMINATED"

        def low_enough(trial_id: str, result: Mapping[str, Any]) -> bool:
            return bool(result["loss"] < 0.5)

        grid = self._fit(tmp_path / "fn", counting, {"floor": grid_search([0.0, 0.3]), "steps": 9}, stop=low_enough)
        rec = experiment_record(grid)
        assert [len(t["results"]) for t in rec["trials"]] == [3, 6]  # 1/3 < 0.5; 0.3 + 1/6 < 0.5
        assert [t["decisions"][-1][:2] for t in rec["trials"]] == [(3, "STOP"), (6, "STOP")]

    # ------------------------------------------------------------------ each method, alone
    def _set_up(self, tmp_path: Any) -> TrialExecutor:
        executor = self.make_executor()
        executor.setup(ExecutorContext(trainable=counting, experiment_name="methods",
                                       experiment_dir=str(tmp_path / "methods"), request={"CPU": 1.0}, world_size=1,
                                       metric="loss", raw_trainable=counting, say=lambda _text: None))
        return executor

    def test_commands_for_an_unknown_trial_are_ignored(self, tmp_path: Any) -> None:
        executor = self._set_up(tmp_path)
        try:
            executor.abort("no-such-trial", "stop")
            executor.fail("no-such-trial", "bad result")
            executor.answer("no-such-trial", Decision.CONTINUE)
            assert executor.poll(0.0) == [] and executor.running() == 0
        finally:
            executor.close()

    def test_unreserve_gives_the_room_back(self, tmp_path: Any) -> None:
        executor = self._set_up(tmp_path)
        try:
            held = [executor.reserve() for _ in range(self.slots)]
            assert all(r is not None for r in held)
            assert executor.reserve() is None  # (every slot is reserved)
            for r in held:
                executor.unreserve(r)
            again = [executor.reserve() for _ in range(self.slots)]
            assert all(r is not None for r in again), "unreserve() gave the room back"
            for r in again:
                executor.unreserve(r)
        finally:
            executor.close()

    def test_teardown_twice_and_close_twice(self, tmp_path: Any) -> None:
        executor = self._set_up(tmp_path)
        try:
            assert executor.teardown("first") == []  # nothing ran
            assert executor.teardown("second") == []
        finally:
            executor.close()
            executor.close()


#: ASHA(max_t=9, grace 1, η=3) over floors [0.5, 0.2, 0.8, 0.0, 0.9, 0.1], one trial at a time: where each stopped
ASHA_ITERATIONS = [9, 9, 1, 9, 1, 9]
ASHA_DECISIONS = [[(9, "STOP")], [(9, "STOP")], [(1, "STOP")], [(9, "STOP")], [(1, "STOP")], [(9, "STOP")]]
#: synchronous PBT (seed 7) of floors [0.0, 2.0]: the second trial exploits the first at every interval
PBT_EXPLOITS: list[list[tuple[int, int, int, float]]] = [[], [(2, 0, 2, 0.25), (4, 0, 4, 0.0), (6, 0, 6, 0.0)]]
PBT_CONFIGS = [{"floor": 0.0, "steps": 6}, {"floor": 0.0, "steps": 6}]
