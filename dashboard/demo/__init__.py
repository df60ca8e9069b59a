"""The demo's wiring: `manage.py demo` starts the simulated GPU host beside web and worker and seeds an experiment.

The only place of the dashboard that imports `simhost`: the product itself never depends on the simulator.
"""
