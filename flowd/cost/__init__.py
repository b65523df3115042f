"""Cost: usage samples from traces, prices, and the cross-run report.

Public entry points: `flowd.cost.prices` (`Prices`, `pricer`, `prices_as_of`), `flowd.cost.samples` (`Sample`, `scan`), `flowd.cost.report` (`build_report`),
`flowd.cost.aggregate` (`Aggregator`, the reader `flowd cost` uses), `flowd.cost.cli` (`cost_command`, `cost_report_for`).
"""
