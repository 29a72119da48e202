"""Loading a sweep: ``module:function`` imports, ``--set`` overrides, ``${env:...}``, and the :class:`Sweep` it builds."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._config import RunConfig, ScalingConfig, TuneConfig
from ._build import _Builder
from ._schema import _TOP_FIELDS, Path, _describe
from ._sweepfile import Doc, Loc, SweepFileError, format_path, parse_scalar, read_document

__all__ = ["Sweep", "_ENV", "apply_overrides", "build_sweep", "interpolate_env", "load_sweep", "portable_data", "read_sweep_document"]

logger = logging.getLogger("tuneplat")


# --------------------------------------------------------------------------- overrides and ${env:VAR}


def apply_overrides(doc: Doc, overrides: Sequence[str], source_prefix: str = "--set") -> None:
    """Apply ``key.path=value`` overrides (value read as one YAML value) to ``doc`` in place.

    Intermediate mappings are created; list items are addressed by index
    (``search.points_to_evaluate.0.lr=0.1``). The overridden keys get the
    override's position, so later errors point at the ``--set`` argument.
    """
    for _i, item in enumerate(overrides):
        source = f"{source_prefix} {item}" if source_prefix == "--set" else source_prefix
        key, eq, text = item.partition("=")
        parts = [p for p in key.strip().split(".")]
        if not eq or not key.strip() or any(not p for p in parts):
            raise SweepFileError("expected key.path=value, e.g. --set scheduler.max_t=50", Loc(source, 1, 1))
        value, vdoc = parse_scalar(text, source, col=len(key) + 2)
        node: Any = doc.data
        path: Path = ()
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            step: Any = part
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise SweepFileError(
                        f"{format_path(path)} is a list of {len(node)} item(s); expected an index "
                        f"0..{len(node) - 1}, got {part!r}",
                        Loc(source, 1, 1),
                        format_path(path),
                    )
                step = int(part)
            elif not isinstance(node, dict):
                raise SweepFileError(
                    f"{format_path(path)} holds {_describe(node)}, not a mapping; cannot set a key inside it",
                    Loc(source, 1, 1),
                    format_path(path),
                )
            if last:
                node[step] = value
            else:
                if isinstance(node, dict) and not isinstance(node.get(step), (dict, list)):
                    node[step] = {}
                node = node[step]
            path = path + (step,)
        for table in (doc.locs, doc.key_locs):
            for p in [p for p in table if p[: len(path)] == path]:
                del table[p]
        doc.key_locs[path] = Loc(source, 1, 1)
        for sub, loc in vdoc.locs.items():
            doc.locs[path + sub] = loc
        for sub, loc in vdoc.key_locs.items():
            doc.key_locs[path + sub] = loc


_ENV = re.compile(r"\$(\$?)\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def interpolate_env(doc: Doc, environ: Mapping[str, str] | None = None) -> Any:
    """A copy of ``doc.data`` with ``${env:VAR}`` replaced (``$${env:VAR}`` stays literal).

    A string that is exactly ``${env:VAR}`` takes the variable's value read as
    a YAML value (so ``num_samples: ${env:N}`` gives an int); inside a longer
    string the text is substituted. Nothing else is interpolated or evaluated.
    """
    env = os.environ if environ is None else environ

    def walk(value: Any, path: Path) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, path + (i,)) for i, v in enumerate(value)]
        if not isinstance(value, str) or "{env:" not in value:
            return value
        for m in _ENV.finditer(value):
            if not m.group(1) and m.group(2) not in env:
                raise doc.error(
                    path,
                    f"environment variable {m.group(2)} is not set (written as ${{env:{m.group(2)}}}); "
                    "expected it to be exported, e.g. `export " + m.group(2) + "=...`",
                )
        whole = _ENV.fullmatch(value)
        if whole and not whole.group(1):
            parsed, _ = parse_scalar(env[whole.group(2)], f"${{env:{whole.group(2)}}}")
            return parsed
        return _ENV.sub(lambda m: "${env:" + m.group(2) + "}" if m.group(1) else env[m.group(2)], value)

    return walk(doc.data, ())


# --------------------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    """A validated sweep file: the objects to give :class:`tuneplat.Tuner`.

    Attributes:
        trainable: the imported function.
        trainable_ref: how the sweep file named it.
        param_space, tune_config, run_config, scaling_config: Tuner arguments.
        data: the effective document (after overrides, before ``${env:...}``),
            as saved into the experiment folder as ``sweep.yaml``.
        source: the file it came from.
        translated_from: "wandb" when the file was a Weights & Biases sweep.
    """

    trainable: Callable[..., Any]
    trainable_ref: str
    param_space: dict[str, Any]
    tune_config: TuneConfig
    run_config: RunConfig
    scaling_config: ScalingConfig | None
    data: dict[str, Any]
    source: str
    translated_from: str | None = None
    notes: list[str] = field(default_factory=list)

    def tuner(self, client: Any = None) -> Any:
        """A :class:`tuneplat.Tuner` for this sweep."""
        from .._tuner import Tuner

        return Tuner(
            self.trainable,
            param_space=self.param_space,
            tune_config=self.tune_config,
            run_config=self.run_config,
            scaling_config=self.scaling_config,
            client=client,
        )


def portable_data(sweep: Sweep) -> dict[str, Any]:
    """``sweep.data`` with a relative ``path/to/file.py:function`` made absolute (for ``sweep.yaml`` copies)."""
    import copy

    data = copy.deepcopy(sweep.data)
    base = os.path.dirname(os.path.abspath(sweep.source))
    for key in ("trainable", "program"):
        ref = data.get(key)
        if not isinstance(ref, str) or ":" not in ref:
            continue
        target, _, attr = ref.rpartition(":")
        if (target.endswith(".py") or "/" in target or os.sep in target) and not os.path.isabs(target):
            for cand in (os.path.join(base, target), os.path.join(os.getcwd(), target)):
                if os.path.isfile(cand):
                    data[key] = f"{os.path.abspath(cand)}:{attr}"
                    break
    return data


def read_sweep_document(path: str | os.PathLike[str], overrides: Sequence[str] = (), text: str | None = None) -> Doc:
    """Read a sweep file and apply ``--set`` overrides (no validation yet)."""
    doc = read_document(path, text)
    apply_overrides(doc, overrides)
    return doc


def build_sweep(doc: Doc, base_dir: str | None = None, environ: Mapping[str, str] | None = None) -> Sweep:
    """Validate a document and build the objects (imports the trainable).

    Raises:
        SweepFileError: the first problem found, with its position.
    """
    import copy

    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(doc.source)) if os.path.isfile(doc.source) else os.getcwd()
    saved = copy.deepcopy(doc.data)
    data = interpolate_env(doc, environ)
    translated = None
    notes: list[str] = []
    from . import _wandb

    if _wandb.is_wandb(data):
        data, notes = _wandb.translate(data, doc)
        translated = "wandb"
    b = _Builder(doc, base_dir)
    b.section((), data, _TOP_FIELDS, "sweep settings")
    if "trainable" not in data:
        raise doc.error(
            (), "missing required key 'trainable'; expected trainable: 'module:function' or 'path/to/file.py:function'"
        )
    trainable = b.ref(("trainable",), data["trainable"])
    space = b.space(("param_space",), data.get("param_space") or {})
    search = b.search(data["search"]) if data.get("search") is not None else None
    scheduler = b.scheduler(data["scheduler"]) if data.get("scheduler") is not None else None
    tune_config = b.tune_config(data, search, scheduler)
    run_config = b.run_config(data)
    scaling = b.scaling(data.get("scaling"))
    return Sweep(
        trainable=trainable,
        trainable_ref=data["trainable"],
        param_space=space,
        tune_config=tune_config,
        run_config=run_config,
        scaling_config=scaling,
        data=saved,
        source=doc.source,
        translated_from=translated,
        notes=notes,
    )


def load_sweep(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, environ: Mapping[str, str] | None = None
) -> Sweep:
    """Read, override, validate and build a sweep file.

    Args:
        path: a ``.yaml``/``.yml``/``.toml`` file (a W&B sweep file is recognised
            by its ``method`` and ``parameters`` keys and translated).
        overrides: ``key.path=value`` strings, as ``tuneplat run --set``.
        environ: where ``${env:VAR}`` is looked up (default ``os.environ``).

    Raises:
        SweepFileError: ``file:line:col: key.path: problem; expected form``.

    Example:
        >>> sweep = load_sweep("examples/toy_asha.yaml", ["scheduler.max_t=5"])  # doctest: +SKIP
        >>> sweep.tune_config.scheduler.max_t  # doctest: +SKIP
        5
    """
    doc = read_sweep_document(path, overrides)
    return build_sweep(doc, environ=environ)
