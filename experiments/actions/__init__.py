"""State changes with side effects (enqueue, broadcast), one module per noun like `models/`.

Each `do_<verb>_<noun>` is atomic; what it enqueues or broadcasts happens on commit.
"""
