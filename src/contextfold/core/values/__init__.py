"""The immutable values everything works on: messages and nodes, branches, resources, tool calls,
content chains, and the bounded memos a process holds.
"""
