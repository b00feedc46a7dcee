"""Does the next request fit: the token estimator, the one sizing policy and the one model resolver
that says which model is sized for.
"""
