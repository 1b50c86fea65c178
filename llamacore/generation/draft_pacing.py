"""How long speculative drafts should be, and whether drafting pays at all.

Drafting gains only when the kept draft tokens are worth more than drafting and verifying cost:
a draft token costs a draft-model step (prompt lookup: almost nothing) and a row in the target's
batch, and each kept one saves a target step. What that nets depends on the draft's cost and on
how predictable the text is, so it is measured, not assumed, in two parts:

* what a step costs: the seconds of a step that carried n draft tokens (drafting included), and
  of a plain one. This is the model's and the machine's, not the text's, and a batch's cost need
  not grow smoothly with its rows (one CPU here: a step of 3 rows costs 1.2 of a one-row step, one
  of 5 rows 2.1; another: 2 rows 2.2, 5 rows 2.5), so it is timed per draft length, in a
  `DraftYardstick` that every sequence of a model shares and that outlives requests;
* how far drafts are kept: per sequence (it is the text's), the share of drafts whose i-th token
  was kept once the ones before it were.

The next draft has the length n that gives the most tokens per second by these: (1 + the tokens
expected kept) / the seconds of an n-draft step. A length not yet timed is taken to cost what the
longest shorter one did, and a position not yet reached to be kept as often as the last one
reached, so longer drafts get tried while every token is kept. A miss at one word of a rewrite
then does not cut the next draft short: the counts, not the last draft, decide.

When the steps that carried drafts were slower than plain steps, drafting rests (drafts nothing)
for a while, four times longer each time in a row; a request of a few hundred tokens has too few
plain steps of its own to time on a noisy machine, and trying drafts anew on every request costs
a few percent where they do not pay, so a new request uses the yardstick at once, and goes on
resting where the previous one stopped.

Used by `Llama` (one sequence, one pacing across calls) and by llamaserve's scheduler (one pacing
per request, one yardstick per loaded model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DECAY = 0.9                            # weight of past steps in the decayed sums: recent ones count most


@dataclass
class DraftYardstick:
    """One model's step costs and current rest, shared by the pacings of its sequences."""

    rest_min: int = 32                 # plain steps in the first rest; each rest in a row is 4x longer
    rest_max: int = 512
    warmup: int = 3                    # plain steps timed before the first draft
    plain_rate: float | None = None    # tokens/s of one sequence's plain steps (moving average)
    plain_steps: int = 0               # plain steps timed so far
    step_seconds: dict[int, float] = field(default_factory=dict)   # draft tokens -> a step's seconds (average)
    next_rest: int = field(init=False, default=0)   # the next rest's length (rest_min after a paying try)
    rest_ends: int = 0                 # plain_steps at which the latest rest ends

    def __post_init__(self) -> None:
        self.next_rest = self.rest_min

    @property
    def ready(self) -> bool:
        return self.plain_rate is not None and self.plain_steps >= self.warmup

    def add_plain(self, produced: int, seconds: float, steps: int = 1) -> None:
        """`steps` plain steps of one sequence: `produced` tokens in `seconds` (once per step,
        however many sequences it decoded)."""
        if produced <= 0 or seconds <= 0:
            return
        rate = produced / seconds
        self.plain_rate = rate if self.plain_rate is None else 0.8 * self.plain_rate + 0.2 * rate
        self.plain_steps += steps

    def add_drafted(self, drafted: int, seconds: float) -> None:
        """A step that carried `drafted` draft tokens took `seconds`, drafting included."""
        if seconds > 0:
            old = self.step_seconds.get(drafted)
            self.step_seconds[drafted] = seconds if old is None else 0.8 * old + 0.2 * seconds

    def cost(self, drafted: int) -> float | None:
        """A step's seconds with `drafted` draft tokens: as timed; else, up to one token longer than
        the longest timed, as the longest shorter timed one's (the floor that gets a longer draft
        tried), and as the shortest timed one's below that; None further out or before any was timed."""
        timed = self.step_seconds
        if drafted in timed:
            return timed[drafted]
        if not timed or drafted > max(timed) + 1:
            return None
        shorter = [n for n in timed if n < drafted]
        return timed[max(shorter)] if shorter else timed[min(timed)]

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
    """One sequence's draft lengths and rests; fed each step's tokens and time by `record`."""

    most: int = 8                      # the longest draft
    yardstick: DraftYardstick = field(default_factory=DraftYardstick)
    first: int = 2                     # the first draft's length, before any was kept or refused
    patience: int = 4                  # drafts in a row refused from their first token before a rest
    trial: int = 4                     # drafted steps between judgements of whether drafting pays
    resting: int = field(init=False, default=0)     # plain steps left in this rest
    misses: int = 0
    _reached: list[float] = field(default_factory=list)    # [i]: drafts whose token i+1 was verified (decayed)
    _kept: list[float] = field(default_factory=list)       # [i]: ... and kept
    _drafted: tuple[float, float] = (0.0, 0.0)             # drafted steps' tokens and seconds (decayed)
    _since_judged: int = 0             # drafted steps since drafting was last judged
    _catching_up: bool = True          # no draft since the start or the last rest
    _after_prompt: bool = True         # the next step follows a prompt's decode

    def __post_init__(self) -> None:
        self.resting = self.yardstick.rest_left()     # the model's rest goes on into a new request
        self._reached, self._kept = [0.0] * self.most, [0.0] * self.most

    @property
    def plain_rate(self) -> float | None:
        return self.yardstick.plain_rate

    def begin(self) -> None:
        """A new prompt was decoded: the drafter catches up with it at its first draft, and the first
        step after it plans the one-row compute graph anew, so neither is what a step usually costs."""
        self._catching_up = self._after_prompt = True

    def expected(self) -> list[float]:
        """[n]: tokens a step with an n-token draft is expected to give, 1 + the draft tokens kept."""
        out, total, chance, rate = [1.0], 1.0, 1.0, 1.0
        for reached, kept in zip(self._reached, self._kept):
            # one draft's worth of belief that a position is kept as often as the one before it:
            # a position seldom reached is judged mostly by its neighbour, not by one unlucky draft
            rate = (kept + rate) / (reached + 1)
            chance *= rate
            total += chance
            out.append(total)
        return out

    def limit(self) -> int:
        """How many tokens the next draft may have: the length with the most expected tokens/s."""
        best, best_rate = min(self.first, self.most), 0.0
        timed = self.yardstick.step_seconds
        if not self.most or self._reached[0] <= 0 or not timed:
            return best
        expected = self.expected()
        for n in range(1, min(self.most, max(timed) + 1) + 1):
            cost = self.yardstick.cost(n)
            if cost is not None and expected[n] / cost > best_rate * 1.001:   # ties: the shorter
                best, best_rate = n, expected[n] / cost
        return best

    def may_draft(self) -> bool:
        """Whether this step may carry drafts: not before the yardstick has timed plain steps, nor in a rest."""
        if not self.yardstick.ready:
            return False
        if self.resting > 0:
            self.resting -= 1
            return False
        return True

    def rested(self, steps: int, seconds: float) -> None:
        """`steps` plain steps of this rest, one token each, were decoded together in `seconds`."""
        self.resting = max(0, self.resting - steps)
        self._after_prompt = False
        self.yardstick.add_plain(steps, seconds, steps)

    def record(self, produced: int, drafted: int, accepted: int, seconds: float) -> None:
        """A step of this sequence: `produced` tokens in `seconds`, after a draft of `drafted`
        tokens of which `accepted` were kept (drafted 0: a plain step, which times the yardstick)."""
        after_prompt, self._after_prompt = self._after_prompt, False
        if not drafted:
            if not after_prompt:
                self.yardstick.add_plain(produced, seconds)
            return
        for i in range(self.most):     # token i+1 was verified if the ones before it were kept
            self._reached[i] *= DECAY
            self._kept[i] *= DECAY
            if i < drafted and i <= accepted:
                self._reached[i] += 1
                self._kept[i] += i < accepted
        self.misses = 0 if accepted else self.misses + 1
        if self.misses >= self.patience:
            self._rest()
            return
        if self._catching_up or after_prompt:    # the drafter first caught up with every token since it
            self._catching_up = False            # last drafted (a prompt, a rest): not what a step costs
            return
        self.yardstick.add_drafted(drafted, seconds)
        tokens, spent = self._drafted
        self._drafted = (DECAY * tokens + produced, DECAY * spent + seconds)
        self._since_judged += 1
        plain = self.yardstick.plain_rate
        if self._since_judged < self.trial or not plain or not self._drafted[1]:
            return
        self._since_judged = 0
        if self._drafted[0] / self._drafted[1] < plain:   # the drafted steps were slower than plain ones
            self._rest()
        else:
            self.yardstick.paid()

    def _rest(self) -> None:
        self.resting = self.yardstick.start_rest()
        # the next try starts from what is known of the text, and is timed afresh
        self.misses, self._since_judged, self._catching_up, self._drafted = 0, 0, True, (0.0, 0.0)
