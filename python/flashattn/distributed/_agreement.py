"""The collective check that opens every distributed call: each rank prepares its call locally, then all
ranks exchange what they found (one all-gather of a small Python object) before any transfer starts, so
that an invalid argument on one rank, or ranks that disagree, make every rank raise the same error instead
of leaving the others waiting for a transfer that never comes."""

from .._core import Error


class Prepared:
    """What a rank contributes to the check: `params` must agree across ranks, `length` is this rank's number
    of rows (None when the call has no sharded rows), `call` is the rank's own prepared work."""

    def __init__(self, params, call=None, length=None):
        self.params, self.call, self.length = params, call, length


def _raise(failures, own_error):
    """Every rank raises one error listing each failed rank's error (TypeError if they are all TypeErrors),
    chained to this rank's own exception if it has one."""
    kinds = {kind for _, (kind, _) in failures}
    message = "; ".join(f"rank {rank}: {text}" for rank, (_, text) in failures)
    raise (TypeError if kinds == {"TypeError"} else Error)(message) from own_error


def agree(allgather, prepare, draw_seed=None):
    """Runs prepare() (→ Prepared) on this rank, gathers every rank's outcome and raises on every rank if any
    rank failed or the ranks' params differ. Returns (call, lengths, seed): this rank's prepared call, every
    rank's length, and the dropout seed every rank uses: params["seed"] when given, else rank 0's
    draw_seed() (0 when params["dropout_p"] is 0 or absent).

    Every rank whose call asks for a drawn seed (dropout_p > 0, seed None) draws one from its own generator,
    so that generators seeded alike on every rank stay alike; the all-gather then carries rank 0's draw to
    the others, so the ranks agree on it even when their generators differ.

    allgather(obj) returns the list of every rank's obj, in rank order (a collective)."""
    mine = {"error": None, "seed": None}
    prepared = own_error = None
    try:
        prepared = prepare()
        mine["params"], mine["length"] = prepared.params, prepared.length
        if prepared.params.get("seed") is None and prepared.params.get("dropout_p", 0) > 0:
            mine["seed"] = draw_seed()
    except Exception as error:  # any failure here must reach the other ranks, or they would wait for us
        own_error = error
        mine["error"] = (type(error).__name__, str(error))
    everyone = allgather(mine)
    failures = [(rank, d["error"]) for rank, d in enumerate(everyone) if d["error"] is not None]
    if failures:
        _raise(failures, own_error)
    for name in everyone[0]["params"]:
        values = [d["params"][name] for d in everyone]
        if any(v != values[0] for v in values):
            held = ", ".join(f"rank {rank} has {v!r}" for rank, v in enumerate(values))
            raise Error(f"the ranks must agree on {name}, but {held}")
    params = everyone[0]["params"]
    seed = params.get("seed")
    if seed is None:
        seed = everyone[0]["seed"] if params.get("dropout_p", 0) > 0 else 0
    return prepared.call, [d["length"] for d in everyone], seed
