"""Search-space domains with Ray Tune's names and semantics.

Domains are plain objects: ``sample(rng)`` draws one value with a
``random.Random``; ``problems()`` lists what is wrong with the arguments (the
``Tuner`` reports them with the key path, before anything runs).

Bounds, exactly as in Ray Tune:

* ``uniform``/``loguniform``: ``lower <= x < upper``;
* ``quniform``/``qloguniform``: the float draw rounded to a multiple of ``q``
  (so ``upper`` can be reached);
* ``randint``/``lograndint``: integers with ``lower <= x < upper`` (upper exclusive);
* ``qrandint``/``qlograndint``: multiples of ``q`` with ``lower <= x <= upper``
  (upper inclusive);
* ``randn``/``qrandn``: normal with mean and standard deviation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "Categorical",
    "Domain",
    "Float",
    "Function",
    "Integer",
    "Normal",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
]


class Domain:
    """A distribution over one hyperparameter's values."""

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        """Draw one value."""
        raise NotImplementedError

    def problems(self) -> list[str]:
        """What is wrong with this domain's arguments (empty when valid)."""
        return []

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None)
        return f"{type(self).__name__}({args})"


def _round_to(value: float, q: float) -> float:
    return round(value / q) * q


def q_range(lower: float, upper: float, q: float) -> tuple[int, int]:
    """``(k_lo, k_hi)``: the multiples of ``q`` in ``[lower, upper]`` are ``k * q``, k_lo <= k <= k_hi.

    A relative tolerance of 1e-9 absorbs float error (``quniform(0.3, 2.0, 0.1)``
    includes 0.3 and 2.0). ``k_lo > k_hi`` when there is no multiple.
    """
    if isinstance(q, int) and isinstance(lower, int) and isinstance(upper, int):
        return -((-lower) // q), upper // q
    return math.ceil(lower / q - 1e-9), math.floor(upper / q + 1e-9)


def _snap_to_grid(value: float, lower: float, upper: float, q: float) -> float:
    """Nearest multiple of ``q`` to ``value`` within ``[lower, upper]``."""
    k_lo, k_hi = q_range(lower, upper, q)
    return min(max(round(value / q), k_lo), k_hi) * q


def _q_problems(q: float | None) -> list[str]:
    if q is None:
        return []
    if not isinstance(q, (int, float)) or isinstance(q, bool) or not q > 0:
        return [f"q={q!r} must be a number > 0"]
    return []


class Float(Domain):
    """Real values in ``[lower, upper)``, optionally on a log scale and/or quantized."""

    def __init__(self, lower: float, upper: float, *, log: bool = False, base: float = 10, q: float | None = None, kind: str = "uniform") -> None:
        self.lower, self.upper, self.log, self.base, self.q, self.kind = lower, upper, log, base, q, kind

    def problems(self) -> list[str]:
        out = []
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                out.append(f"{name}={v!r} must be a finite number")
        if out:
            return out
        if self.lower >= self.upper:
            out.append(f"lower={self.lower!r} must be < upper={self.upper!r}")
        if self.log and self.lower <= 0:
            out.append(f"lower={self.lower!r} must be > 0 on a log scale (e.g. {self.kind}(1e-5, {self.upper!r}))")
        if self.log and not (self.base > 0 and self.base != 1):
            out.append(f"base={self.base!r} must be > 0 and != 1")
        out += _q_problems(self.q)
        if self.q is not None and not out:
            k_lo, k_hi = q_range(self.lower, self.upper, self.q)
            if k_lo > k_hi:
                out.append(f"no multiple of q={self.q!r} lies in [{self.lower!r}, {self.upper!r}]")
        return out

    def sample(self, rng: random.Random, spec: Any = None) -> float:
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = self.base ** rng.uniform(lo, hi)
            value = min(max(value, self.lower), self.upper)
        else:
            value = rng.uniform(self.lower, self.upper)
        if self.q is not None:
            # a multiple of q in [lower, upper] (upper reachable, as Ray's quniform)
            return float(_snap_to_grid(value, self.lower, self.upper, self.q))
        if value >= self.upper:  # float rounding in uniform()/pow(): keep upper exclusive
            value = math.nextafter(self.upper, -math.inf)
        return float(value)

    def __repr__(self) -> str:
        extra = f", q={self.q!r}" if self.q is not None else ""
        return f"{self.kind}({self.lower!r}, {self.upper!r}{extra})"


class Integer(Domain):
    """Integers; ``upper`` is exclusive unless quantized (Ray's rule)."""

    def __init__(self, lower: int, upper: int, *, log: bool = False, base: float = 10, q: int | None = None, kind: str = "randint") -> None:
        self.lower, self.upper, self.log, self.base, self.q, self.kind = lower, upper, log, base, q, kind

    @property
    def upper_inclusive(self) -> bool:
        return self.q is not None

    def problems(self) -> list[str]:
        out = []
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                out.append(f"{name}={v!r} must be an int")
        if out:
            return out
        if self.lower >= self.upper:
            out.append(f"lower={self.lower!r} must be < upper={self.upper!r}")
        if self.log and self.lower <= 0:
            out.append(f"lower={self.lower!r} must be > 0 on a log scale")
        out += _q_problems(self.q)
        if self.q is not None and not isinstance(self.q, int):
            out.append(f"q={self.q!r} must be an int for an integer domain")
        elif self.q is not None and not out:
            k_lo, k_hi = q_range(self.lower, self.upper, self.q)
            if k_lo > k_hi:
                out.append(f"no multiple of q={self.q!r} lies in [{self.lower!r}, {self.upper!r}]")
        return out

    def sample(self, rng: random.Random, spec: Any = None) -> int:
        if self.q is not None:
            if self.log:
                lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
                raw = self.base ** rng.uniform(lo, hi)
            else:
                raw = rng.uniform(self.lower, self.upper)
            # the nearest multiple of q within [lower, upper] (upper inclusive)
            return int(_snap_to_grid(raw, self.lower, self.upper, self.q))
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = int(math.floor(self.base ** rng.uniform(lo, hi)))
            return min(max(value, self.lower), self.upper - 1)
        return rng.randrange(self.lower, self.upper)

    def __repr__(self) -> str:
        extra = f", q={self.q!r}" if self.q is not None else ""
        return f"{self.kind}({self.lower!r}, {self.upper!r}{extra})"


class Normal(Domain):
    """Normal distribution, optionally quantized."""

    def __init__(self, mean: float = 0.0, sd: float = 1.0, *, q: float | None = None) -> None:
        self.mean, self.sd, self.q = mean, sd, q

    def problems(self) -> list[str]:
        out = []
        if isinstance(self.mean, bool) or not isinstance(self.mean, (int, float)) or not math.isfinite(self.mean):
            out.append(f"mean={self.mean!r} must be a finite number (randn(mean, sd) draws one number; for one of "
                       "several values use choice([...]))")
        if isinstance(self.sd, bool) or not isinstance(self.sd, (int, float)) or not self.sd > 0:
            out.append(f"sd={self.sd!r} must be a number > 0")
        return out + _q_problems(self.q)

    def sample(self, rng: random.Random, spec: Any = None) -> float:
        value = rng.gauss(self.mean, self.sd)
        return float(_round_to(value, self.q)) if self.q is not None else value

    def __repr__(self) -> str:
        return f"randn({self.mean!r}, {self.sd!r})" if self.q is None else f"qrandn({self.mean!r}, {self.sd!r}, {self.q!r})"


class Categorical(Domain):
    """One of a list of values."""

    def __init__(self, categories: Sequence[Any]) -> None:
        self.categories = list(categories) if not isinstance(categories, (str, bytes)) else categories

    def problems(self) -> list[str]:
        if isinstance(self.categories, (str, bytes)):
            return [f"categories={self.categories!r} must be a list of values, not a string"]
        if len(self.categories) == 0:
            return ["categories=[] must hold at least one value"]
        return []

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        return self.categories[rng.randrange(len(self.categories))]

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


class Function(Domain):
    """``sample_from(func)``: ``func(config)`` computes the value from the rest of the config.

    ``func`` receives the config resolved so far, which reads both ways Ray's
    guides write it: ``config["alpha"]`` (Ray 2.x docs) and ``spec.config.alpha``
    (older ones).
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def problems(self) -> list[str]:
        return [] if callable(self.func) else [f"sample_from needs a callable, got {self.func!r}"]

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        try:
            return self.func(spec)
        except TypeError:
            import inspect

            if len(inspect.signature(self.func).parameters) == 0:
                return self.func()
            raise

    def __repr__(self) -> str:
        return f"sample_from({getattr(self.func, '__name__', self.func)!r})"


def uniform(lower: float, upper: float) -> Float:
    """Float uniformly in ``[lower, upper)``."""
    return Float(lower, upper, kind="uniform")


def quniform(lower: float, upper: float, q: float) -> Float:
    """Float uniformly in ``[lower, upper]``, rounded to a multiple of ``q``."""
    return Float(lower, upper, q=q, kind="quniform")


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """Float in ``[lower, upper)`` uniform on a log scale."""
    return Float(lower, upper, log=True, base=base, kind="loguniform")


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """Log-uniform float rounded to a multiple of ``q``."""
    return Float(lower, upper, log=True, base=base, q=q, kind="qloguniform")


def randint(lower: int, upper: int) -> Integer:
    """Integer in ``[lower, upper)`` (upper exclusive)."""
    return Integer(lower, upper, kind="randint")


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """Multiple of ``q`` in ``[lower, upper]`` (upper inclusive)."""
    return Integer(lower, upper, q=q, kind="qrandint")


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """Integer in ``[lower, upper)`` uniform on a log scale (upper exclusive)."""
    return Integer(lower, upper, log=True, base=base, kind="lograndint")


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """Log-uniform multiple of ``q`` in ``[lower, upper]`` (upper inclusive)."""
    return Integer(lower, upper, log=True, base=base, q=q, kind="qlograndint")


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """Normally distributed float."""
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """Normally distributed float rounded to a multiple of ``q``."""
    return Normal(mean, sd, q=q)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, uniformly."""
    return Categorical(categories)


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by ``func(config)`` from the other resolved values.

    Example:
        >>> space = {"alpha": uniform(0, 1), "beta": sample_from(lambda config: config["alpha"] * 2)}
    """
    return Function(func)


def grid_search(values: Sequence[Any]) -> dict[str, list[Any]]:
    """Every value in turn: grids are crossed with each other and repeated ``num_samples`` times."""
    return {"grid_search": list(values)}
