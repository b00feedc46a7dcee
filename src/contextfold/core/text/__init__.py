"""Reading text: its conservative token count, the identifiers a resumed agent must quote verbatim,
and the sentences that state a rule.
"""
