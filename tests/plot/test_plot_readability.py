"""Plots a newcomer can read: curves not squashed by iteration 1, whole iteration ticks, the timeline's legend aside."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import tuneplat as tune  # noqa: E402
from tuneplat.plot import plot_learning_curves, plot_timeline  # noqa: E402
from tuneplat.schedulers import ASHAScheduler  # noqa: E402
from tuneplat.testing import VirtualTimeExecutor  # noqa: E402


def steep(config):
    """A first loss far above the rest (as an untrained net's first epoch), then a gentle slope."""
    yield {"loss": config["first"]}
    for step in range(2, 10):
        yield {"loss": config["floor"] + 0.1 / step}


def _grid(storage, first, name, n=12):
    space = {"floor": tune.grid_search([0.2 + 0.02 * i for i in range(n)]), "first": first}
    return tune.Tuner(steep, param_space=space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min",
                                                  scheduler=ASHAScheduler(max_t=9, grace_period=2, reduction_factor=3)),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def test_values_over_orders_of_magnitude_get_a_log_axis_whole_ticks_and_no_colour_bar(storage):
    fig = plot_learning_curves(_grid(storage, 400.0, "decades").experiment_path)
    (ax,) = fig.axes  # no colour bar beside the curves
    assert ax.get_yscale() == "log"
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_a_first_iteration_far_above_the_rest_is_clipped_not_squashing_the_curves(storage):
    fig = plot_learning_curves(_grid(storage, 5.0, "clip").experiment_path)
    (ax,) = fig.axes
    assert ax.get_yscale() == "linear"
    lo, hi = ax.get_ylim()
    assert hi < 1.0 and lo < 0.3  # the later values (0.2 .. 0.45) fill the axis; 5.0 is above it
    assert "clipped" in ax.get_title()
    # asked for explicitly, nothing is decided for the user
    assert plot_learning_curves(_grid(storage, 400.0, "asked").experiment_path, log_y=False).axes[0].get_yscale() == "linear"


def test_the_timeline_legend_does_not_cover_the_first_trials_bar(storage):
    fig = plot_timeline(_grid(storage, 5.0, "timeline", n=6).experiment_path)
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    spans = next(c for c in ax.collections if c.get_gid() == "spans")
    (x0, y0), (x1, _y1) = spans.get_segments()[0]
    first_bar = ax.transData.transform([(x0, y0), (x1, y0)])
    assert not (legend.x0 <= first_bar[1][0] and first_bar[0][0] <= legend.x1
                and legend.y0 <= first_bar[0][1] <= legend.y1)
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes
