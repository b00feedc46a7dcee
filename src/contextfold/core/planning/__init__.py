"""The prepare step of a compaction: when to compact, where raw retention resumes, masking or
summary, the split turn and the identifier ledger.
"""
