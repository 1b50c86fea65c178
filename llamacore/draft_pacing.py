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

What does not depend on the text is learnt once per model, in a `DraftYardstick` that every
sequence's pacing shares and that outlives requests: the plain steps' tokens/s, and the rest the
last judgement started. A request of a few hundred tokens has too few plain steps of its own to
time on a noisy machine, and trying drafts anew on every request costs a few percent where they
do not pay; so a new request draws on the yardstick at once, and goes on resting where the
previous one stopped.

Used by `Llama` (one sequence, one pacing across calls) and by llamaserve's scheduler (one pacing
per request, one yardstick per loaded model).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftYardstick:
    """One model's plain-step speed and current rest, shared by the pacings of its sequences."""

    rest_min: int = 32                 # plain steps in the first rest; each rest in a row is 4x longer
    rest_max: int = 512
    warmup: int = 3                    # plain steps timed before the first draft
    plain_rate: float | None = None    # tokens/s of one sequence's plain steps (moving average)
    plain_steps: int = 0               # plain steps timed so far
    next_rest: int = field(init=False, default=0)   # the next rest's length (rest_min after a paying try)
    rest_ends: int = 0                 # plain_steps at which the latest rest ends

    def __post_init__(self) -> None:
        self.next_rest = self.rest_min

    @property
    def ready(self) -> bool:
        return self.plain_rate is not None and self.plain_steps >= self.warmup

    def add_plain(self, produced: int, seconds: float) -> None:
        """A plain step of one sequence: `produced` tokens in `seconds` (once per step, however
        many sequences it decoded)."""
        if produced <= 0 or seconds <= 0:
            return
        rate = produced / seconds
        self.plain_rate = rate if self.plain_rate is None else 0.8 * self.plain_rate + 0.2 * rate
        self.plain_steps += 1

    def rest_left(self) -> int:
        """Plain steps left in the latest rest, for a request that starts now."""
        return max(0, self.rest_ends - self.plain_steps)

    def start_rest(self) -> int:
        """A judgement found drafting slower than plain: the length of the rest it starts."""
        rest, self.next_rest = self.next_rest, min(self.rest_max, 4 * self.next_rest)
        self.rest_ends = self.plain_steps + rest
        return rest

    def paid(self) -> None:
        """A judgement found drafting faster than plain: a later rest starts short again."""
        self.next_rest = self.rest_min


@dataclass
class DraftPacing:
    """One sequence's draft length and rests; fed each step's tokens and time by `record`."""

    most: int = 8                      # the longest draft
    yardstick: DraftYardstick = field(default_factory=DraftYardstick)
    length: int = 2                    # the longest draft now
    patience: int = 4                  # drafts in a row refused from their first token before a rest
    trial: int = 4                     # drafted steps between judgements of whether drafting pays
    resting: int = field(init=False, default=0)     # plain steps left in this rest
    misses: int = 0
    _since_judged: int = 0             # drafted steps since drafting was last judged
    _by_length: dict[int, tuple[float, float]] = field(default_factory=dict)   # drafted -> (tokens, seconds)
    _catching_up: bool = True          # no draft since the start or the last rest
    _after_prompt: bool = True         # the next step follows a prompt's decode

    def __post_init__(self) -> None:
        self.resting = self.yardstick.rest_left()     # the model's rest goes on into a new request

    @property
    def plain_rate(self) -> float | None:
        return self.yardstick.plain_rate

    def begin(self) -> None:
        """A new prompt was decoded: the drafter catches up with it at its first draft, and the first
        step after it plans the one-row compute graph anew, so neither is what a step usually costs."""
        self._catching_up = self._after_prompt = True

    def limit(self) -> int:
        """How many tokens the next draft may have: `length`, within one more than the length whose
        steps gave the most tokens/s (a longer one is tried once that one leads, and kept if better)."""
        if not self._by_length:
            return self.length
        best = max(self._by_length, key=lambda n: self._by_length[n][0] / self._by_length[n][1])
        return max(1, min(self.length, best if best + 1 in self._by_length else best + 1))

    def may_draft(self) -> bool:
        """Whether this step may carry drafts: not before the yardstick has timed plain steps, nor in a rest."""
        if not self.yardstick.ready:
            return False
        if self.resting > 0:
            self.resting -= 1
            return False
        return True

    def record(self, produced: int, drafted: int, accepted: int, seconds: float) -> None:
        """A step of this sequence: `produced` tokens in `seconds`, after a draft of `drafted`
        tokens of which `accepted` were kept (drafted 0: a plain step, which times the yardstick)."""
        after_prompt, self._after_prompt = self._after_prompt, False
        if not drafted:
            if not after_prompt:
                self.yardstick.add_plain(produced, seconds)
            return
        if seconds > 0 and not self._catching_up and not after_prompt:   # decayed sums: recent steps count most
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
        plain = self.yardstick.plain_rate
        if self._since_judged < self.trial or not plain or not self._by_length:
            return
        self._since_judged = 0
        if self._best_rate() < plain:   # even the best draft length is slower than none
            self._rest()
        else:
            self.yardstick.paid()

    def _best_rate(self) -> float:
        return max(tokens / spent for tokens, spent in self._by_length.values())

    def _rest(self) -> None:
        self.resting = self.yardstick.start_rest()
        # the next try starts with one-token drafts: the cheapest test of whether drafts pay now
        self.length, self.misses, self._since_judged, self._catching_up = 1, 0, 0, True
