# Ray Train's "Hyperparameter tuning with Ray Tune" guide: a TorchTrainer inside a Tuner, with the ScalingConfig and
# the train_loop_config in param_space; air.session spellings. Imports changed only. No main guard.
from tuneplat import tune  # was: from ray import tune
from tuneplat.air import session  # was: from ray.air import session
from tuneplat.train import ScalingConfig  # was: from ray.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer
from tuneplat.tune import Tuner  # was: from ray.tune import Tuner


def train_fn(config):
    world = session.get_world_size()
    for epoch in range(3):
        session.report({"loss": config["lr"] * (3 - epoch), "world": world})


trainer = TorchTrainer(train_fn, scaling_config=ScalingConfig(num_workers=1))
param_space = {  # the guide's search over the number of workers: each trial gets its own group size
    "scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2])),
    "train_loop_config": {"lr": tune.grid_search([0.1, 0.2])},
}
tuner = Tuner(trainer, param_space=param_space,
              tune_config=tune.TuneConfig(metric="loss", mode="min"))
results = tuner.fit()
print("WORLDS", sorted((r.config["scaling_config"]["num_workers"], r.metrics["world"]) for r in results), "BEST_LR",
      results.get_best_result().config["train_loop_config"]["lr"])
