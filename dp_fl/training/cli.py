"""Command-line surface shared by the task binaries: flags → a validated TrainingConfig.

The binary owns its parser and parses it in `main`; this module only adds the training
arguments to that parser and turns the parsed namespace into a `TrainingConfig`, so every
task has the same flags and none re-declares them: one per common field of `TrainingConfig`
and one per field of the settings dataclasses of the registries (`registry.setting_fields`:
a mechanism's, a participation's, a runtime's), with the settings' own help text. Values
come from, in increasing priority: the defaults, the task's defaults, the chosen preset, and
the flags the user actually gave.

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
from typing import Any, Callable, Mapping, NamedTuple, Optional

from dp_fl import exits
from dp_fl import resources
from dp_fl.execution import learners
from dp_fl.training import calibration
from dp_fl.training import config as config_lib
from dp_fl.training import noise_guard
from dp_fl.training import registry

_HELP = {
    "root_dir": "run directory (checkpoints, metrics, privacy report); resumes if it has one",
    "rounds": "n: training rounds",
    "clients_per_round": "m: report goal / clients per round (C̃ for Poisson sampling)",
    "mechanism": "privacy mechanism: " + ", ".join(registry.MECHANISMS),
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
    "participation": "who takes part: " + ", ".join(registry.PARTICIPATIONS),
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
    "audit_canaries": "K canary clients for the empirical privacy audit (0: none); the "
                      "privacy report gains an audited ε next to the accounted one",
    "audit_strict": "exit non-zero when the audit's lower bound exceeds the accounted ε",
    "noise_guard": "the DP noise against the clipped signal: state it and warn when it is "
                   "beyond what learns (warn), also scale the server learning rate down to "
                   "the limit (scale: the presets'), or neither (off)",
    "runtime": "how rounds execute: " + "; ".join(
        f"{name} ({r.description})" for name, r in learners.RUNTIMES.items()),
}
"""The help of the common fields' flags (a setting's is in its field: `config_lib.setting`)."""

# Fields a binary decides itself (not flags).
_NOT_FLAGS = ("task",) + config_lib.SETTINGS

_CHOICES = {"mechanism": tuple(registry.MECHANISMS),
            "participation": tuple(registry.PARTICIPATIONS),
            "on_nonfinite": config_lib.ON_NONFINITE,
            "client_optimizer": config_lib.CLIENT_OPTIMIZERS,
            "server_optimizer": config_lib.SERVER_OPTIMIZERS,
            "noise_guard": noise_guard.GUARDS}


parse_bool = exits.parse_bool


def _flag_fields() -> list[tuple[dataclasses.Field, str]]:
  """(field, help) of every training flag: the common fields, then every setting."""
  common = [(f, _HELP.get(f.name, "")) for f in dataclasses.fields(config_lib.TrainingConfig)
            if f.name not in _NOT_FLAGS]
  return common + [(f, f.metadata.get("help", ""))
                   for _, f in registry.setting_fields().values()]


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
  """Adds one --flag per common TrainingConfig field and per setting (default None: "not
  given"); a setting's earlier names (`config_lib.setting(aliases=...)`) are accepted too."""
  group = parser.add_argument_group("training (dp_fl.training.TrainingConfig)")
  for field, help_text in _flag_fields():
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    kwargs: dict[str, Any] = {"default": None, "help": help_text}
    if "bool" in kind:
      kwargs.update(type=parse_bool, nargs="?", const=True, metavar="BOOL")
    elif "float" in kind:
      kwargs["type"] = float
    elif "int" in kind:
      kwargs["type"] = int
    if field.name in _CHOICES:
      kwargs["choices"] = _CHOICES[field.name]
    aliases = [f"--{alias}" for alias in field.metadata.get("aliases", ())]
    group.add_argument(f"--{field.name}", *aliases, **kwargs)


def flag_names() -> tuple[str, ...]:
  """The names of the training flags (= the config's fields and settings)."""
  return tuple(field.name for field, _ in _flag_fields())


def given(args: argparse.Namespace) -> dict[str, Any]:
  """The training flags the user gave (those not None)."""
  names = set(flag_names())
  return {k: v for k, v in vars(args).items() if k in names and v is not None}


class Preset(NamedTuple):
  """A task binary's `--preset`: task settings, training settings, and the training settings
  tuned per mechanism (paper 004 tuned each mechanism's learning rates separately; e.g. plain
  FedAvg's unclipped updates need a smaller server step than clipped ones), applied when the
  run's `--mechanism` (given, or the preset's) is one of them. Flags the user gives override
  all three."""
  task: Mapping[str, Any]
  training: Mapping[str, Any]
  per_mechanism: Mapping[str, Mapping[str, Any]] = {}
  # The ε the noise multiplier is calibrated to for the planned schedule, whatever the
  # mechanism and schedule flags (as `--calibrate_epsilon`), unless the user gives
  # `--noise_multiplier` or `--calibrate_epsilon`. None: the preset's noise multiplier.
  calibrate_epsilon: Optional[float] = None

  def training_for(self, mechanism: Optional[str]) -> dict[str, Any]:
    """The training settings for `mechanism` (None: the preset's own)."""
    values = dict(self.training)
    values.update(self.per_mechanism.get(mechanism or values.get("mechanism"), {}))
    return values


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
    return registry.make_config(**values)
  except ValueError as e:
    from_preset = {k: v for k, v in (preset or {}).items() if k not in user_values}
    raise ValueError(as_flags(str(e), from_preset, getattr(args, "preset", None))) from None


_FIELD_NAME = re.compile(r"`([a-z_]+)`")


def as_flags(message: str, from_preset: Mapping[str, Any] = (),
             preset_name: Optional[str] = None) -> str:
  """A TrainingConfig error as the binary's user sees it: fields as `--flags`, and a note for
  each named value that came from the preset rather than from the user."""
  fields = set(flag_names())
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
                      help="set the noise multiplier so the participation the scheduler "
                           "will realize (emulated; dp_fl/training/calibration.py) reaches "
                           "this ε at δ; the run also stops before any round that would "
                           "report more (as --target_epsilon)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("-v", "--verbosity", type=int, default=0,
                      help="0 quiet, 1 warnings, 2 info, 3 debug (TF/TFF logs)")
  exits.add_debug_flag(parser)
  resources.add_budget_flags(parser)


def task_values_and_config(args: argparse.Namespace, presets: Mapping[str, Any],
                           task_fields: tuple[str, ...], task: str
                           ) -> tuple[dict[str, Any], config_lib.TrainingConfig]:
  """(task settings values, TrainingConfig) from the chosen preset < the given flags.

  `presets[name]` is a `Preset`; its per-mechanism settings apply for the run's mechanism.
  The run directory defaults to `<tmp>/dp_fl_<task>_<preset>`.
  """
  import os  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  preset = presets[args.preset]
  train_preset = preset.training_for(getattr(args, "mechanism", None))
  values = dict(preset.task)
  values.update({k: getattr(args, k) for k in task_fields if getattr(args, k) is not None})
  root_default = os.path.join(tempfile.gettempdir(), f"dp_fl_{task}_{args.preset}")
  config = training_config(args, task=task, defaults={"root_dir": root_default},
                           preset=train_preset)
  return values, config


def epsilon_to_calibrate(args: argparse.Namespace,
                         presets: Mapping[str, Preset]) -> Optional[float]:
  """The ε to calibrate σ for: `--calibrate_epsilon`, else the preset's unless the user
  gave `--noise_multiplier` (None: no calibration)."""
  if args.calibrate_epsilon is not None:
    return args.calibrate_epsilon
  if getattr(args, "noise_multiplier", None) is not None:
    return None
  return presets[args.preset].calibrate_epsilon


def check_flags_read(args: argparse.Namespace, runs: list[tuple[str, str]]) -> None:
  """Refuses a flag the user gave that none of `runs` ((mechanism, participation)) reads —
  e.g. --cpsgd_trials with --mechanism=blt, --timer_hours with --participation=poisson —
  naming the flag, its value and the fix (issue #39: such flags were silently ignored)."""
  problems = registry.ignored_flags(given(args), runs)
  if problems:
    raise ValueError(" ".join(problems))


def _check_calibrate_epsilon(value: float) -> None:
  if not (value > 0 and value < float("inf")):
    raise ValueError(f"--calibrate_epsilon must be a finite ε > 0; got {value!r}. Pass the ε "
                     "to calibrate σ for, e.g. 8.")


def run_task_binary(args: argparse.Namespace,
                    settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
                    make_task: Callable[[Any], Any],
                    presets: Mapping[str, Preset]) -> int:
  """The body of a task binary's `main` after parsing: returns the exit code (`dp_fl.exits`).

  Builds the task and config, calibrates σ if asked, trains inside dp_fl's execution
  context, prints the summary (table or JSON). The exit code says how the run ended: 0 all
  rounds done, 5 target ε, 6 non-finite, 7 no clients, 75 interrupted (resumable); errors:
  2 bad input, 3 environment, 4 run directory busy, 1 internal (traceback with --debug).
  """
  return exits.guarded(lambda: _train(args, settings_and_config, make_task, presets),
                       debug=getattr(args, "debug", False))


def _train(args: argparse.Namespace,
           settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
           make_task: Callable[[Any], Any], presets: Mapping[str, Preset]) -> int:
  import json  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  resources.set_budgets_from_flags(args.memory_budget_gb, args.time_budget_hours)
  if args.calibrate_epsilon is not None:
    _check_calibrate_epsilon(args.calibrate_epsilon)
  settings, config = settings_and_config(args)
  check_flags_read(args, [(config.mechanism, config.participation)])
  target_epsilon = epsilon_to_calibrate(args, presets)
  print(f"run directory: {config.root_dir}", flush=True)
  task = make_task(settings)
  print(task.description, flush=True)
  config, moved = program.runtime_for_cohort(config, program.model_dimension(task),
                                             "runtime" in given(args),
                                             given(args).get("device"))
  if moved:
    print(moved, flush=True)
  program.check_job_time(task, config)  # Before a calibration that emulates every round.
  if target_epsilon is not None and registry.mechanism(config.mechanism).private:
    num_clients = program.population(task, config)
    config = config.replace(noise_multiplier=program.calibrate_noise_multiplier(
        config, target_epsilon, num_clients, task))
    for line in program.calibration_lines(config, target_epsilon, num_clients, task):
      print(line, flush=True)
    # The realized participation may still exceed the planned one: the run stops before
    # any round that would report more than the ε asked for.
    config = calibration.with_budget(config, target_epsilon)
  # A worker that crashes mid-run is replaced and the run resumes from its last checkpoint.
  result = runtime.run_with_fresh_workers(lambda: program.run(task, config),
                                          on_restart=lambda line: print(line, flush=True))
  if args.format == "json":
    print(json.dumps(program.summary_dict(task, config, result), indent=1, default=str))
  else:
    print("\n".join(program.summary_lines(task, result)))
  if result.audit_failed and config.audit_strict:
    return exits.AUDIT_FAILED
  return exits.STOP_CODES[result.stopped]


def add_compare_arguments(parser: argparse.ArgumentParser, task: str) -> None:
  """The flags of a task's `compare` binary (dp_fl/training/compare.py) besides the task's."""
  import os  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  from dp_fl.training import compare as compare_lib  # pylint: disable=g-import-not-at-top
  group = parser.add_argument_group("comparison")
  group.add_argument("--mechanisms", default=",".join(compare_lib.DEFAULT_MECHANISMS),
                     help="comma-separated mechanisms to compare (non-private ones, none "
                          "and clip, are the reference rows)")
  group.add_argument("--out_dir", default=os.path.join(tempfile.gettempdir(),
                                                       f"dp_fl_{task}_compare"),
                     help="one run directory per run under <out_dir>/<mechanism>/, and "
                          "comparison.{json,md,png}")
  group.add_argument("--seeds", type=int, default=3,
                     help="runs per mechanism at the chosen learning rate (mean ± std)")
  group.add_argument("--lr_factors", default=",".join(
      f"{f:g}" for f in compare_lib.DEFAULT_LR_FACTORS),
                     help="the server learning-rate grid, as factors of each mechanism's "
                          "tuned rate; chosen on the validation data (one value: no grid)")
  group.add_argument("--participations", default=None,
                     help="comma-separated --participation schemes: each private mechanism "
                          "is compared under each (rows mechanism@participation, each at the "
                          "same ε with its own, possibly amplified, accounting: e.g. "
                          "device_timer,balls_in_bins,cyclic_poisson); default: --participation")
  group.add_argument("--max_grid_extensions", type=int, default=2,
                     help="while the best rate lies on the grid's edge, add up to this many "
                          "rates one step past it (0: the grid as given)")
  parser.set_defaults(calibrate_epsilon=8.0)


def compare_main(argv: Optional[list[str]], description: str,
                 build_parser: Callable[[], argparse.ArgumentParser],
                 settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
                 make_task: Callable[[Any], Any], task: str) -> int:
  """A task's `compare` binary: its train binary's flags plus the comparison's; returns
  the exit code (`dp_fl.exits`)."""
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  parser = build_parser()
  parser.description = description
  add_compare_arguments(parser, task)
  args = parser.parse_args(argv)
  runtime.configure_logging(args.verbosity)
  runtime.install_signal_handlers()
  return exits.guarded(lambda: _compare(args, settings_and_config, make_task),
                       debug=getattr(args, "debug", False))


def _parse_list(flag: str, text: str, kind: Callable[[str], Any]) -> list[Any]:
  try:
    values = [kind(v.strip()) for v in text.split(",") if v.strip()]
  except ValueError:
    values = []
  if not values:
    raise ValueError(f"--{flag}={text!r} must be a comma-separated list of "
                     f"{'numbers' if kind is float else 'names'}.")
  return values


def _compare(args: argparse.Namespace,
             settings_and_config: Callable[[argparse.Namespace], tuple[Any, Any]],
             make_task: Callable[[Any], Any]) -> int:
  import json  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  from dp_fl.training import compare as compare_lib  # pylint: disable=g-import-not-at-top
  resources.set_budgets_from_flags(args.memory_budget_gb, args.time_budget_hours)
  mechanisms = _parse_list("mechanisms", args.mechanisms, str)
  unknown = [m for m in mechanisms
             if m.split(registry.ADAPTIVE_VARIANT)[0] not in registry.MECHANISMS]
  if unknown:
    raise ValueError(f"--mechanisms={args.mechanisms!r}: unknown {unknown}; known: "
                     f"{', '.join(registry.MECHANISMS)} (and <name>"
                     f"{registry.ADAPTIVE_VARIANT} for adaptive clipping).")
  for label in mechanisms:
    try:
      registry.variant(label)
    except ValueError as e:
      raise ValueError(f"--mechanisms={args.mechanisms!r}: {e}") from e
  factors = _parse_list("lr_factors", args.lr_factors, float)
  if any(not (f > 0 and f < float("inf")) for f in factors):
    raise ValueError(f"--lr_factors={args.lr_factors!r} must be positive finite numbers, "
                     "e.g. 0.5,1,2.")
  if args.seeds < 1:
    raise ValueError(f"--seeds={args.seeds} must be at least 1.")
  if args.max_grid_extensions < 0:
    raise ValueError(f"--max_grid_extensions={args.max_grid_extensions} must be at least 0 "
                     "(0 keeps the grid as given).")
  if args.root_dir is not None:
    raise ValueError(f"--root_dir={args.root_dir!r} is not used by compare: it writes one run "
                     "per mechanism and setting under --out_dir. Pass --out_dir.")
  if args.mechanism is not None:
    raise ValueError(f"--mechanism={args.mechanism!r} is not used by compare; pass "
                     "--mechanisms (comma-separated).")
  _check_calibrate_epsilon(args.calibrate_epsilon)

  participations = None
  if args.participations is not None:
    participations = _parse_list("participations", args.participations, str)
    unknown = [p for p in participations if p not in registry.PARTICIPATIONS]
    if unknown:
      raise ValueError(f"--participations={args.participations!r}: unknown {unknown}; known: "
                       f"{', '.join(registry.PARTICIPATIONS)}.")

  def config_for(label: str, participation: Optional[str] = None):
    """The run's config as if its mechanism (and participation) had been given as flags; a
    variant's settings (`registry.variant`) as if given too, unless the user gave them."""
    mechanism, settings = registry.variant(label)
    flags = {k: v for k, v in settings.items() if getattr(args, k, None) is None}
    flags["mechanism"] = mechanism
    if participation is not None:
      flags["participation"] = participation
    return settings_and_config(argparse.Namespace(**{**vars(args), **flags}))[1]

  try:
    runs = []
    for label in mechanisms:  # Every configuration valid before any training.
      config = config_for(label)
      schemes = list(participations or [config.participation])
      private = registry.mechanism(config.mechanism).private
      for participation in (schemes if private else schemes[:1]):
        runs.append((config.mechanism, config_for(label, participation).participation))
    check_flags_read(args, runs)  # A flag is kept if some compared run reads it.
    settings, _ = settings_and_config(args)
    task = make_task(settings)
    print(task.description, flush=True)
    from dp_fl.training import program  # pylint: disable=g-import-not-at-top
    dimension = program.model_dimension(task)
    moved_lines = set()

    def config_on_runtime(label, participation=None):
      config, moved = program.runtime_for_cohort(config_for(label, participation), dimension,
                                                 "runtime" in given(args),
                                                 given(args).get("device"))
      if moved and moved not in moved_lines:
        moved_lines.add(moved)
        print(moved, flush=True)
      return config

    output = compare_lib.compare(
        task, config_on_runtime, mechanisms=mechanisms, target_epsilon=args.calibrate_epsilon,
        out_dir=args.out_dir, lr_factors=factors, seeds=args.seeds,
        max_grid_extensions=args.max_grid_extensions, participations=participations,
        progress=lambda line: print(line, flush=True))
  except ValueError as e:  # The runs' directories are compare's --out_dir/<...>.
    raise ValueError(str(e).replace("`--root_dir`", "`--out_dir`").replace(
        "--root_dir", "--out_dir")) from None
  print(json.dumps(output, indent=1, default=str) if args.format == "json"
        else compare_lib.markdown(output))
  return exits.COMPLETED
