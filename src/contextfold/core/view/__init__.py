"""The model's view of a branch: the projection (checkpoint, kept tail, what followed), masked tool
output and the active pins.
"""
