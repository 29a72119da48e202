"""Function trainables that return or yield their results, as Ray Tune's may.

Ray Tune reports what a function trainable returns (its quickstart's
``def objective(config): return {"score": ...}``) and what a generator
function yields: a dict is a result, a number is ``{"_metric": number}``. The
:class:`tuneplat.Tuner` wraps every plain function trainable in
:class:`ReportsReturn`, so the same happens here, on the worker, through
:func:`tuneplat.report`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from numbers import Number
from typing import Any

from ..result import DEFAULT_METRIC

__all__ = ["DEFAULT_METRIC", "ReportsReturn"]



def _report_output(output: Any) -> None:
    from ..train._session import report

    if output is None or output is False or (isinstance(output, (Mapping, Number)) and not output):
        return  # Ray ignores a falsy return value (None, {}, 0)
    if isinstance(output, Mapping):
        report(dict(output))
    elif isinstance(output, Number) and not isinstance(output, bool):
        report({DEFAULT_METRIC: output})
    elif output is not True:
        raise ValueError(f"The trainable returned or yielded a {type(output).__name__}; a function trainable may "
                         "return or yield a dict of metrics or a single number (reported as '_metric'), or call "
                         "tune.report(...) and return None.")


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    try:
        return len(inspect.signature(fn).parameters) == 0
    except (TypeError, ValueError):
        return False


class ReportsReturn:
    """A function trainable whose returned (or yielded) dict or number is reported, as in Ray Tune."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__module__ = getattr(fn, "__module__", __name__)

    def __call__(self, config: dict[str, Any], **kwargs: Any) -> Any:
        fn = self._fn
        output = fn() if not kwargs and _takes_no_arguments(fn) else fn(config, **kwargs)
        if inspect.isgenerator(output):
            last = None
            for last in output:
                _report_output(last)
            return last
        _report_output(output)
        return output

    def __repr__(self) -> str:
        return f"ReportsReturn({self.__qualname__})"

