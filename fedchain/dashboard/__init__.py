"""``fedchain dashboard``: a local web app that follows runs live, and a control panel.

The pure cores fold a run's files into a view (:mod:`~fedchain.dashboard.model`), draw
charts as SVG (:mod:`~fedchain.dashboard.svg`) and render HTML panels
(:mod:`~fedchain.dashboard.render`); :mod:`~fedchain.dashboard.discovery` classifies the
directories under ``--runs``; :mod:`~fedchain.dashboard.sources` tails a run directory or a
testnet's node logs and chain; :mod:`~fedchain.dashboard.jobs` starts and stops CLI commands
for the control panel; :mod:`~fedchain.dashboard.app` is the Starlette application (pages,
JSON API, server-sent events) and :mod:`~fedchain.dashboard.server` runs it under uvicorn on
127.0.0.1. :mod:`~fedchain.dashboard.report_html` writes the self-contained HTML report of
``fedchain report RUN_DIR --html``.
"""
