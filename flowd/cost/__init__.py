"""Cost: usage samples from traces, prices, the cross-run report, and live budget tracking.

Public entry points: `flowd.cost.prices` (`Prices`, `pricer`, `prices_as_of`), `flowd.cost.budget`
(`BudgetTracker`), `flowd.cost.samples` (`Sample`, `scan`), `flowd.cost.report` (`build_report`),
`flowd.cost.cli` (`cost_command`, `cost_report_for`).
"""
