"""Filters the Python-hook rollout tests load (Slime's signatures)."""


def newest_first(args, rollout_id, buffer, num_samples):
    """Takes the most recently buffered groups, removing them from the buffer in place."""
    taken = buffer[-num_samples:][::-1]
    del buffer[-num_samples:]
    return taken


def returns_dict(args, samples):
    return {"keep": True}


def raises(args, samples):
    raise KeyError("no such judge")
