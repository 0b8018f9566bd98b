"""Command-line surface shared by the task binaries: flags → a validated TrainingConfig.

The binary owns its parser and parses it in `main`; this module only adds the training
arguments to that parser and turns the parsed namespace into a `TrainingConfig`, so every
task has the same flags and none re-declares them. Values come from, in increasing
priority: `TrainingConfig`'s defaults, the task's defaults, the chosen preset, and the
flags the user actually gave.

    parser = argparse.ArgumentParser()
    cli.add_training_arguments(parser)
    cli.add_binary_arguments(parser, PRESETS, default_preset="quick")
    parser.add_argument("--data_dir")          # task-specific flags
    args = parser.parse_args(argv)
    config = cli.training_config(args, task="stackoverflow",
                                 defaults={"root_dir": "/tmp/run"}, preset=TRAIN_PRESET)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable, Mapping, Optional

from dp_fl import exits
from dp_fl import resources
from dp_fl.training import config as config_lib
from dp_fl.training import learners

_HELP = {
    "root_dir": "run directory (checkpoints, metrics, privacy report); resumes if it has one",
    "rounds": "n: training rounds",
    "clients_per_round": "m: report goal / clients per round (C̃ for Poisson sampling)",
    "mechanism": "privacy mechanism: " + ", ".join(config_lib.MECHANISMS),
    "noise_multiplier": "σ: noise std / clip norm (z for DP-FedAvg)",
    "clip_norm": "ζ: L2 clip norm of each client update",
    "seed": "seed of the public parts: model init, mechanism optimization, simulated "
            "availability (never the noise or the sampling)",
    "reproducible_noise_seed": "research only: derive the noise and the client sampling "
                               "from this number (default: OS entropy, kept only in "
                               "checkpoints); the run is then NOT private against anyone "
                               "who knows it",
    "min_sep": "b: min separation (rounds) the mechanism is optimized for / enforced by "
               "--participation=min_sep_rounds",
    "max_participations": "k the mechanism is optimized for (default ceil(n/b))",
    "blt_buffers": "d: BLT buffers",
    "bandmf_bands": "BandMF bands (default min(b, n))",
    "mechanism_params": "JSON file with mechanism parameters (from scripts/mechanism)",
    "participation": "who takes part: " + ", ".join(config_lib.PARTICIPATIONS),
    "timer_hours": "device timer: hours before a device may take part again",
    "round_hours": "simulated duration of a round (device timer)",
    "availability": "device availability: always or diurnal",
    "population_sampling_rate": "q for Poisson sampling (default clients_per_round / "
                                "population)",
    "client_optimizer": "client optimizer: " + ", ".join(config_lib.CLIENT_OPTIMIZERS),
    "client_learning_rate": "client learning rate",
    "client_epochs": "local epochs per round",
    "server_optimizer": "server optimizer: " + ", ".join(config_lib.SERVER_OPTIMIZERS),
    "server_learning_rate": "server learning rate",
    "server_momentum": "server SGD momentum (paper 004: 0.9); Adam's beta_1",
    "server_adam_epsilon": "Adam's epsilon (--server_optimizer=adam)",
    "cooldown_rounds": "linear server-lr cooldown over the last R rounds",
    "cooldown_final_fraction": "lr at the end of the cooldown, as a fraction",
    "eval_every": "evaluate every E rounds",
    "checkpoint_every": "checkpoint every K rounds",
    "keep_checkpoints": "checkpoints to keep",
    "delta": "δ of the privacy report",
    "target_epsilon": "stop before ε would exceed this",
    "on_nonfinite": "a round with a non-finite loss: stop or discard",
    "jit_compile": "XLA-compile the client step (--runtime=xla only: TFF 0.87's C++ worker "
                   "has no XLA)",
    "runtime": "how rounds execute: " + "; ".join(
        f"{name} ({r.description})" for name, r in learners.RUNTIMES.items()),
    "device": "where --runtime=xla runs: " + ", ".join(learners.DEVICES) + " (auto: a GPU, "
              "else a TPU, else the CPU)",
}

# Fields a binary decides itself (not flags).
_NOT_FLAGS = ("task",)


def parse_bool(text: str) -> bool:
  lowered = str(text).lower()
  if lowered in ("1", "true", "yes", "on"):
    return True
  if lowered in ("0", "false", "no", "off"):
    return False
  raise argparse.ArgumentTypeError(f"expected true or false; got {text!r}")


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
  """Adds one --flag per TrainingConfig field (default None: "not given")."""
  group = parser.add_argument_group("training (dp_fl.training.TrainingConfig)")
  for field in dataclasses.fields(config_lib.TrainingConfig):
    if field.name in _NOT_FLAGS:
      continue
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    kwargs: dict[str, Any] = {"default": None, "help": _HELP.get(field.name, "")}
    if "bool" in kind:
      kwargs.update(type=parse_bool, nargs="?", const=True, metavar="BOOL")
    elif "float" in kind:
      kwargs["type"] = float
    elif "int" in kind:
      kwargs["type"] = int
    if field.name == "mechanism":
      kwargs["choices"] = config_lib.MECHANISMS
    elif field.name == "participation":
      kwargs["choices"] = config_lib.PARTICIPATIONS
    elif field.name == "on_nonfinite":
      kwargs["choices"] = config_lib.ON_NONFINITE
    elif field.name == "client_optimizer":
      kwargs["choices"] = config_lib.CLIENT_OPTIMIZERS
    elif field.name == "server_optimizer":
      kwargs["choices"] = config_lib.SERVER_OPTIMIZERS
    group.add_argument(f"--{field.name}", **kwargs)


def given(args: argparse.Namespace) -> dict[str, Any]:
  """The training flags the user gave (those not None)."""
  names = {f.name for f in dataclasses.fields(config_lib.TrainingConfig)}
  return {k: v for k, v in vars(args).items() if k in names and v is not None}


def training_config(args: argparse.Namespace, *, task: str,
                    defaults: Optional[Mapping[str, Any]] = None,
                    preset: Optional[Mapping[str, Any]] = None) -> config_lib.TrainingConfig:
  """TrainingConfig from config defaults < task defaults < preset < given flags."""
  values: dict[str, Any] = dict(defaults or {})
  values.update(preset or {})
  user_values = given(args)
  values.update(user_values)
  values["task"] = task
  missing = [k for k in ("root_dir", "rounds", "clients_per_round") if k not in values]
  if missing:
    raise ValueError(f"{', '.join('--' + k for k in missing)} required.")
  try:
    return config_lib.TrainingConfig(**values)
  except ValueError as e:
    from_preset = {k: v for k, v in (preset or {}).items() if k not in user_values}
    raise ValueError(as_flags(str(e), from_preset, getattr(args, "preset", None))) from None


_FIELD_NAME = re.compile(r"`([a-z_]+)`")


def as_flags(message: str, from_preset: Mapping[str, Any] = (),
             preset_name: Optional[str] = None) -> str:
  """A TrainingConfig error as the binary's user sees it: fields as `--flags`, and a note for
  each named value that came from the preset rather than from the user."""
  fields = {f.name for f in dataclasses.fields(config_lib.TrainingConfig)} - set(_NOT_FLAGS)
  named = [m for m in _FIELD_NAME.findall(message) if m in fields]
  text = _FIELD_NAME.sub(lambda m: f"`--{m.group(1)}`" if m.group(1) in fields
                         else m.group(0), message)
  notes = [f"--{name}={from_preset[name]!r} comes from --preset={preset_name}, not from your "
           f"flags: pass --{name} to override it" for name in dict.fromkeys(named)
           if name in from_preset]
  return text + ("" if not notes else " (" + "; ".join(notes) + ")")


def add_binary_arguments(parser: argparse.ArgumentParser, presets: Mapping[str, Any],
                         default_preset: str) -> None:
  """The flags every task binary has besides the training ones: preset, calibration, output."""
  parser.add_argument("--preset", choices=sorted(presets), default=default_preset)
  parser.add_argument("--calibrate_epsilon", type=float, default=None,
                      help="set the noise multiplier so the planned schedule (rounds, min_sep, "
                           "max_participations) reaches this ε at δ")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("-v", "--verbosity", type=int, default=0,
                      help="0 quiet, 1 warnings, 2 info, 3 debug (TF/TFF logs)")
  exits.add_debug_flag(parser)
  resources.add_budget_flags(parser)


def task_values_and_config(args: argparse.Namespace, presets: Mapping[str, Any],
                           task_fields: tuple[str, ...], task: str
                           ) -> tuple[dict[str, Any], config_lib.TrainingConfig]:
  """(task settings values, TrainingConfig) from the chosen preset < the given flags.

  `presets[name]` is (task settings, training settings); the run directory defaults to
  `<tmp>/dp_fl_<task>_<preset>`.
  """
  import os  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  task_preset, train_preset = presets[args.preset]
  values = dict(task_preset)
  values.update({k: getattr(args, k) for k in task_fields if getattr(args, k) is not None})
  root_default = os.path.join(tempfile.gettempdir(), f"dp_fl_{task}_{args.preset}")
  config = training_config(args, task=task, defaults={"root_dir": root_default},
                           preset=train_preset)
  return values, config


def run_task_binary(args: argparse.Namespace,
                    settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
                    make_task: Callable[[Any], Any]) -> int:
  """The body of a task binary's `main` after parsing: returns the exit code (`dp_fl.exits`).

  Builds the task and config, calibrates σ if asked, trains inside dp_fl's execution
  context, prints the summary (table or JSON). The exit code says how the run ended: 0 all
  rounds done, 5 target ε, 6 non-finite, 7 no clients, 75 interrupted (resumable); errors:
  2 bad input, 3 environment, 4 run directory busy, 1 internal (traceback with --debug).
  """
  return exits.guarded(lambda: _train(args, settings_and_config, make_task),
                       debug=getattr(args, "debug", False))


def _train(args: argparse.Namespace,
           settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
           make_task: Callable[[Any], Any]) -> int:
  import json  # pylint: disable=g-import-not-at-top
  from dp_fl import runtime  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  resources.set_budgets_from_flags(args.memory_budget_gb, args.time_budget_hours)
  if args.calibrate_epsilon is not None and not (
      args.calibrate_epsilon > 0 and args.calibrate_epsilon < float("inf")):
    raise ValueError(f"--calibrate_epsilon must be a finite ε > 0; got "
                     f"{args.calibrate_epsilon!r}. Pass the ε to calibrate σ for, e.g. 8.")
  settings, config = settings_and_config(args)
  print(f"run directory: {config.root_dir}", flush=True)
  task = make_task(settings)
  print(task.description, flush=True)
  with runtime.execution_context():
    if args.calibrate_epsilon is not None:
      config = config.replace(noise_multiplier=program.calibrate_noise_multiplier(
          config, args.calibrate_epsilon))
      print(f"noise multiplier {config.noise_multiplier:.6g} gives ε = "
            f"{args.calibrate_epsilon:g} at δ = {config.delta:g} for the planned schedule",
            flush=True)
    result = program.run(task, config)
  if args.format == "json":
    print(json.dumps(program.summary_dict(task, config, result), indent=1, default=str))
  else:
    print("\n".join(program.summary_lines(task, result)))
  return exits.STOP_CODES[result.stopped]
