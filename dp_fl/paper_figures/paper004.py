"""Paper 004's figures in the paper's order: the list `scripts/paper004_figures` runs.

Each entry is one module's `FIGURE` (`figure_spec.PaperFigure`): its name is the module's
name and the stem of the JSON and PNG files it writes. Fig. 7 (the production training
curves) has no counterpart in the library.
"""

from __future__ import annotations

from dp_fl.paper_figures import fig01_optimization_time
from dp_fl.paper_figures import fig02_rms_loss_vs_min_sep
from dp_fl.paper_figures import fig03_vary_min_sep
from dp_fl.paper_figures import fig04_vary_min_sep_k_n_over_b
from dp_fl.paper_figures import fig05_vary_rounds
from dp_fl.paper_figures import fig06_min_sep_robustness
from dp_fl.paper_figures import fig08_extrapolation
from dp_fl.paper_figures import fig09_epsilon_vs_rounds
from dp_fl.paper_figures import fig10_blt_toeplitz_coefficients
from dp_fl.paper_figures import figure_spec

MODULES = (fig01_optimization_time, fig02_rms_loss_vs_min_sep, fig03_vary_min_sep,
           fig04_vary_min_sep_k_n_over_b, fig05_vary_rounds, fig06_min_sep_robustness,
           fig08_extrapolation, fig09_epsilon_vs_rounds, fig10_blt_toeplitz_coefficients)
FIGURES: tuple[figure_spec.PaperFigure, ...] = tuple(module.FIGURE for module in MODULES)
