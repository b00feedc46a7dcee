"""`python -m contextfold` runs the command-line tool."""

from .cli import app

app()
