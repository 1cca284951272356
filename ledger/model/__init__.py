"""Between the rules and storage: the operation registry, event body → helper rows, the view
protocol over SQL and in memory, and the case package's layout."""
