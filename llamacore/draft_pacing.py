"""How long speculative drafts should be, and whether drafting pays at all.

Drafting gains only when the kept draft tokens are worth more than drafting and verifying cost:
a draft token costs a draft-model step (prompt lookup: almost nothing) and a row in the target's
batch, and each kept one saves a target step. What that nets depends on the draft's cost and on
how predictable the text is, so it is measured, not assumed: `DraftPacing` compares the tokens/s
of the steps that carried drafts with those of plain steps, and rests (drafts nothing) for a while
when drafting was slower, four times longer each time in a row. Draft lengths follow what was kept: they
start short, double while every draft token is kept and shrink to what was kept; and they stay
at the length whose steps gave the most tokens/s, since a batch's cost need not grow smoothly
with its rows (one CPU here: a step of 3 rows costs 1.2 of a one-row step, one of 5 rows 2.1).

Used by `Llama` (one sequence) and by llamaserve's scheduler (one pacing per sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftPacing:
    """One sequence's draft length and rests; fed each step's tokens and time by `record`."""

    most: int = 8                      # the longest draft
    length: int = 2                    # the longest draft now
    patience: int = 4                  # drafts in a row refused from their first token before a rest
    trial: int = 4                     # drafted steps between judgements of whether drafting pays
    rest_min: int = 32                 # plain steps in the first rest; each rest in a row is 4x longer
    rest_max: int = 512
    resting: int = 0                   # plain steps left in this rest
    next_rest: int = field(init=False, default=0)   # the next rest's length (rest_min after a paying try)
    misses: int = 0
    plain_rate: float | None = None    # tokens/s of plain steps (moving average)
    _since_judged: int = 0             # drafted steps since drafting was last judged
    _by_length: dict[int, tuple[float, float]] = field(default_factory=dict)   # drafted -> (tokens, seconds)
    _catching_up: bool = True          # no draft since the start or the last rest

    def __post_init__(self) -> None:
        self.next_rest = self.rest_min

    def limit(self) -> int:
        """How many tokens the next draft may have: `length`, within one more than the length whose
        steps gave the most tokens/s (a longer one is tried once that one leads, and kept if better)."""
        if not self._by_length:
            return self.length
        best = max(self._by_length, key=lambda n: self._by_length[n][0] / self._by_length[n][1])
        return max(1, min(self.length, best if best + 1 in self._by_length else best + 1))

    def may_draft(self) -> bool:
        """Whether this step may carry drafts; a plain step comes first (it is the yardstick)."""
        if self.plain_rate is None:
            return False
        if self.resting > 0:
            self.resting -= 1
            return False
        return True

    def record(self, produced: int, drafted: int, accepted: int, seconds: float) -> None:
        """A step of this sequence: `produced` tokens in `seconds`, after a draft of `drafted`
        tokens of which `accepted` were kept (drafted 0: a plain step)."""
        if not drafted:
            if produced > 0 and seconds > 0:
                rate = produced / seconds
                self.plain_rate = rate if self.plain_rate is None else 0.8 * self.plain_rate + 0.2 * rate
            return
        if seconds > 0 and not self._catching_up:     # decayed sums: recent steps count most
            tokens, spent = self._by_length.get(drafted, (0.0, 0.0))
            self._by_length[drafted] = (0.9 * tokens + produced, 0.9 * spent + seconds)
        self.length = min(self.most, 2 * self.length) if accepted == drafted else max(1, accepted + 1)
        self.misses = 0 if accepted else self.misses + 1
        if self.misses >= self.patience:
            self._rest()
            return
        if self._catching_up:            # the drafter first caught up with every token since it last
            self._catching_up = False    # drafted (a prompt, a rest): not what a draft usually costs
            return
        self._since_judged += 1
        if self._since_judged < self.trial or not self.plain_rate or not self._by_length:
            return
        self._since_judged = 0
        if self._best_rate() < self.plain_rate:   # even the best draft length is slower than none
            self._rest()
        else:
            self.next_rest = self.rest_min         # drafting pays: a later rest starts short again

    def _best_rate(self) -> float:
        return max(tokens / spent for tokens, spent in self._by_length.values())

    def _rest(self) -> None:
        self.resting, self.next_rest = self.next_rest, min(self.rest_max, 4 * self.next_rest)
        # the next try starts with one-token drafts: the cheapest test of whether drafts pay now
        self.length, self.misses, self._since_judged, self._catching_up = 1, 0, 0, True
