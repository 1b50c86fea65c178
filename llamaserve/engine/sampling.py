"""Each running request's sampler chain on an engine's context.

A sampler is built when its request arrives (on the engine's thread: a grammar compiles then),
used for every row the scheduler samples for that request, and released with the request's last
event. Drafts are verified here: the tokens one-token steps would have sampled, from one decode.
"""

from __future__ import annotations

import dataclasses

from llamacore import Context, Model, Sampler
from llamacore.generation.logprobs import TokenLogprob
from llamaserve.engine.request import GenRequest, Sampled


class RequestSamplers:
    """The samplers of one engine's requests; `seed` is the sampling seed of requests that set none."""

    def __init__(self, model: Model, ctx: Context, seed: int | None = None) -> None:
        self.model = model
        self.ctx = ctx
        self.seed = seed
        self._samplers: dict[GenRequest, Sampler] = {}

    def add(self, req: GenRequest) -> None:
        """Build `req`'s sampler; raises what building it raised (a bad grammar, say)."""
        sampling = req.sampling
        if sampling.seed is None and self.seed is not None:
            sampling = dataclasses.replace(sampling, seed=self.seed)
        self._samplers[req] = sampling.build(self.model)

    def release(self, req: GenRequest) -> None:
        self._samplers.pop(req, None)

    def close(self) -> None:
        """Drop every sampler and the model and context, which the engine is freeing."""
        self._samplers.clear()
        self.ctx = None       # type: ignore[assignment]
        self.model = None     # type: ignore[assignment]

    def sample(self, req: GenRequest, index: int) -> Sampled:
        """`req`'s token from the logits of batch output `index` (with logprobs if it asked)."""
        token = self._samplers[req].sample(self.ctx, index)
        entry = None
        if req.n_logprobs is not None:
            entry = TokenLogprob.from_logits(self.ctx.logits(index), token, req.n_logprobs, self._piece_text)
        return Sampled(token, self.model.is_eog(token), entry)

    def verify(self, req: GenRequest, index: int, draft: list[int]) -> list[Sampled]:
        """Sample after the next token and after each draft token in turn, up to the first token that
        differs from the draft: what one-token steps would have sampled, in one decode."""
        out = []
        for k in range(len(draft) + 1):
            s = self.sample(req, index + k)
            out.append(s)
            if k == len(draft) or s.token != draft[k] or s.eog:
                break
        return out

    def _piece_text(self, token: int) -> str:
        return self.model.token_to_piece(token).decode("utf-8", "replace")
