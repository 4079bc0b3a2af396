"""The file ``memgrad train --save`` writes and ``--resume`` and ``memgrad sample`` read: one
``mg.save`` file (data only, no pickle) holding the model's hyperparameters with its weights,
AdamW's state, the global generator's state, the step count and the loss of every step.

NOTE [ Train run file ]
The object saved is a dict:

    {"kind": "memgrad train", "version": 1,
     "model": {"d_model": int, "heads": int, "blocks": int, "seq": int, "dtype": str},
     "training": {"lr": float, "batch": int, "seed": int, "world": int},
     "step": int, "losses": float64 array of every step's loss (rank 0's),
     "weights": model.state_dict(), "optimizer": AdamW.state_dict(),
     "rng": mg.get_rng_state()}

A run resumed from it with the same batch, seed and number of processes takes the very
steps an uninterrupted run would: the weights, AdamW's moments and step counts, the global
generator and the position in the shuffled data all continue from ``step``.

Example:
    >>> MODEL_KEYS
    ('d_model', 'heads', 'blocks', 'seq', 'dtype')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import memgrad as mg
from memgrad import nn
from memgrad.cli.output import CliError, first_line
from memgrad.models import build_lm

__all__ = ["KIND", "VERSION", "MODEL_KEYS", "TRAINING_KEYS", "save_run", "load_run",
           "saved_model"]

KIND = "memgrad train"
VERSION = 1
MODEL_KEYS = ("d_model", "heads", "blocks", "seq", "dtype")
TRAINING_KEYS = ("lr", "batch", "seed", "world")
_TYPES = {"d_model": int, "heads": int, "blocks": int, "seq": int, "dtype": str, "lr": float,
          "batch": int, "seed": int, "world": int}


def save_run(path: Path, hyper: dict[str, Any], model: nn.Module, opt: mg.optim.Optimizer,
             losses: list[float], rng: dict[str, Any]) -> tuple[int, int]:
    """Write the run file of NOTE [ Train run file ] to ``path``; ``hyper`` holds the values
    of ``MODEL_KEYS`` and ``TRAINING_KEYS``, ``rng`` the global generator's state after the
    last step. Returns the number of weight tensors and their
    bytes.

    Example:
        >>> import tempfile
        >>> model = build_lm(8, 2, 1, 4)
        >>> opt = mg.optim.AdamW(model.parameters())
        >>> hyper = dict(d_model=8, heads=2, blocks=1, seq=4, dtype="float32", lr=1e-3,
        ...              batch=2, seed=0, world=1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = save_run(Path(d) / "run.npz", hyper, model, opt, [5.5], mg.get_rng_state())
        ...     load_run(str(Path(d) / "run.npz"), "--resume")["step"]
        1
    """
    weights = model.state_dict()
    mg.save({
        "kind": KIND, "version": VERSION,
        "model": {k: hyper[k] for k in MODEL_KEYS},
        "training": {k: hyper[k] for k in TRAINING_KEYS},
        "step": len(losses), "losses": np.asarray(losses, dtype=np.float64),
        "weights": weights, "optimizer": opt.state_dict(), "rng": rng,
    }, path)
    return len(weights), sum(np.asarray(a).nbytes for a in weights.values())


def _where(option: str, path: str) -> str:
    return f"{option} {path}" if option else path


def _not_a_run(option: str, path: str, what: str) -> CliError:
    return CliError(f"{_where(option, path)}: {what}; give a file written by "
                    "'memgrad train --save'")


def _read(path: str, option: str) -> Any:
    p = Path(path)
    if not p.is_file():
        if p.is_dir():
            what = "is a directory; give the file 'memgrad train --save' wrote"
        elif Path(path + ".npz").is_file():
            what = f"no such file; did you mean {path}.npz (--save adds .npz)?"
        else:
            what = "no such file; give the path 'memgrad train --save' printed"
        raise CliError(f"{_where(option, path)}: {what}")
    try:
        return mg.load(p)
    except RuntimeError as e:  # not an mg.save file: mg.load says what it is
        raise CliError(_where(option, first_line(e).removeprefix("mg.load: "))) from None
    except OSError as e:
        raise CliError(f"{_where(option, path)}: cannot read it ({e.strerror or e})") from None


def load_run(path: str, option: str) -> dict[str, Any]:
    """The run file at ``path``, checked to be one ``memgrad train --save`` wrote (see NOTE
    [ Train run file ]); errors start with ``option`` (a flag such as ``"--resume"``, or
    ``""``) and the path.

    Raises:
        CliError: when the file is missing, not an ``mg.save`` file, or not a run file.
    """
    run = _read(path, option)
    if not isinstance(run, dict) or run.get("kind") != KIND:
        held = f"a {type(run).__name__}" if not isinstance(run, dict) else (
            f"a dict with keys {', '.join(map(repr, list(run)[:4]))}")
        raise _not_a_run(option, path, f"was written by mg.save but not by memgrad train "
                                       f"(it holds {held}, no hyperparameters)")
    if not isinstance(run.get("version"), int) or run["version"] > VERSION:
        raise CliError(f"{_where(option, path)}: a run file of version "
                       f"{run.get('version')!r}; this memgrad reads version {VERSION}: "
                       "upgrade memgrad")
    for group, keys in (("model", MODEL_KEYS), ("training", TRAINING_KEYS)):
        values = run.get(group)
        for key in keys:
            if not isinstance(values, dict) or not isinstance(values.get(key), _TYPES[key]):
                raise _not_a_run(option, path, f"its {group} hyperparameter {key!r} is missing "
                                               "or has the wrong type")
    if run["model"]["dtype"] not in ("float32", "float64"):
        raise _not_a_run(option, path, f"its dtype {run['model']['dtype']!r} is not float32 "
                                       "or float64")
    for key, kind in (("step", int), ("losses", np.ndarray), ("weights", dict),
                      ("optimizer", dict), ("rng", dict)):
        if not isinstance(run.get(key), kind):
            raise _not_a_run(option, path, f"its entry {key!r} is missing or damaged")
    if run["step"] < 1 or run["losses"].shape != (run["step"],):
        raise _not_a_run(option, path, f"its step {run['step']} does not match its "
                                       f"{run['losses'].size} losses")
    return run


def saved_model(run: dict[str, Any], option: str, path: str) -> nn.Sequential:
    """The model of a run file, built from its hyperparameters, with its weights.

    Raises:
        CliError: when the weights do not fit the model the hyperparameters describe.
    """
    h = run["model"]
    if h["d_model"] % h["heads"]:
        raise _not_a_run(option, path, f"its d_model {h['d_model']} is not a multiple of its "
                                       f"heads {h['heads']}")
    model = build_lm(h["d_model"], h["heads"], h["blocks"], h["seq"])
    model.to(np.dtype(h["dtype"]))
    try:
        model.load_state_dict(run["weights"])
    except (RuntimeError, TypeError, ValueError) as e:
        raise _not_a_run(option, path, f"its weights do not fit its model ({first_line(e)})"
                         ) from None
    return model
