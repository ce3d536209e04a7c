"""`make chaos`: Weft under kill -9. A server (SQLite, PostgreSQL, or two nodes
on PostgreSQL), deciders and runners run a few hundred workflows, each with
activities, a timer and a signal sent more than once; every kind of process is
killed at random moments and restarted (PostgreSQL too, when the run has a
cluster of its own). Then every history is checked: nothing lost, nothing
duplicated, nothing stuck, every result right.

    python -m chaos --minutes 10
"""
