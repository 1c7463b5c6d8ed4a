"""The broker's background loops, one module each (the way dstack keeps one module per
background task): each is a coroutine over the explicit collaborators it needs, ends when
its `closing` says so, and decides nothing itself (the core does; a loop only says when).
`service/broker.py` starts them.
"""
