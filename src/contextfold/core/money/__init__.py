"""What requests and sessions cost: prices and cache rules, session costs, and where a request stops
reusing the cached prefix.
"""
