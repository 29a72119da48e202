"""``ScalingConfig(num_workers=(min, max))``: the elastic form, its bounds, and bad input named plainly."""

from __future__ import annotations

import pickle

import pytest

from tuneplat import ScalingConfig


def test_tuple_form_gives_bounds_and_an_int_stays_a_fixed_size_group():
    sc = ScalingConfig(num_workers=(2, 4))
    assert (sc.elastic, sc.min_workers, sc.max_workers, sc.num_workers) == (True, 2, 4, (2, 4))
    fixed = ScalingConfig(num_workers=3)
    assert (fixed.elastic, fixed.min_workers, fixed.max_workers) == (False, 3, 3)
    same = ScalingConfig(num_workers=(2, 2))  # min == max: a fixed-size group of 2
    assert (same.elastic, same.min_workers, same.max_workers) == (False, 2, 2)
    assert ScalingConfig(num_workers=[1, 3]).num_workers == (1, 3)  # (from a YAML or JSON list)
    restored = pickle.loads(pickle.dumps(sc))  # how Tuner.restore keeps the bounds
    assert (restored.elastic, restored.min_workers, restored.max_workers) == (True, 2, 4)


@pytest.mark.parametrize("value, message", [
    ((0, 4), r"`ScalingConfig.num_workers \(min_workers\)` is 0, but must be >= 1"),
    ((4, 2), r"`ScalingConfig.num_workers` is \(4, 2\), but must be \(min_workers, max_workers\) with "
             r"min_workers <= max_workers, e.g. \(2, 4\)"),
    ((1.5, 4), r"`ScalingConfig.num_workers \(min_workers\)` is 1.5, but must be an int"),
    ((1, "4"), r"`ScalingConfig.num_workers \(max_workers\)` is '4', but must be an int"),
    ((1, 2, 3), r"`ScalingConfig.num_workers` is \(1, 2, 3\), but must be an int >= 1, or a tuple"),
    ((True, 2), r"`ScalingConfig.num_workers \(min_workers\)` is True, but must be an int"),
    (-1, r"`ScalingConfig.num_workers` is -1, but must be an int >= 1 \(0: local mode.*\), or a tuple \(min_workers, "
         r"max_workers\)"),
    (2.0, r"`ScalingConfig.num_workers` is 2.0, but must be an int >= 1"),
])
def test_bad_bounds_name_the_rule(value, message):
    with pytest.raises(ValueError, match=message):
        ScalingConfig(num_workers=value)


def test_bad_resize_interval_names_the_rule():
    with pytest.raises(ValueError, match=r"`ScalingConfig.elastic_resize_monitor_interval_s` is -1"):
        ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=-1)
