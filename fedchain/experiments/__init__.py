"""``fedchain experiment``: grids of fedchain runs (and attacks) over seeds, with figures.

:mod:`.grid` (grids and their TOML format), :mod:`.cells` (what one cell runs),
:mod:`.execute` (units, resume, progress, the run directory), :mod:`.stats`,
:mod:`.plots`, :mod:`.report` (summary.md and figures), :mod:`.builtin` (the named
experiments), :mod:`.inversion` (gradient inversion for the recovery experiment).
"""
