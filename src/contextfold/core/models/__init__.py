"""What a model can hold: the capacity catalog and the budgets derived from a capacity."""
