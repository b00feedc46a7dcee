"""A branch rendered for a reader: provider request shapes (and independent checks of them), and the
plain text the summariser reads.
"""
